"""Running a sweep's failed and early-stopped members again: for each point of the sweep
(its parameters) whose latest member failed or was stopped by the stopping rule, a new
member with the same spec (so the same snapshot: the same code) and parameters, in the same
sweep, whose leaderboard then ranks it beside the others. The new members are the sweep
owner's, whoever asks (an admin may), and held while the sweep is; a cancelled sweep is not
run again."""

import json
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, select, update
from sqlmodel import Session

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus, Reason
from service.errors import Conflict, GpuqError
from service.jobs.batch_inserts import INSERT_AUDIT
from service.jobs.batch_store import store
from service.jobs.host_share import ShareDefaults
from service.jobs.submission import Limits, submission
from service.jobs.writes import JOB
from service.store.db import Database, utcnow
from service.store.tables import Sweep, User
from service.sweeps.actions import check_may_change_sweep
from service.sweeps.reads import get_sweep, load_sweep
from service.sweeps.submit import SWEEP
from service.team.users import Caller

USER = User.__table__  # type: ignore[attr-defined]
_MEMBERS = select(JOB.c.id, JOB.c.spec, JOB.c.params, JOB.c.status, JOB.c.reason)


def rerun_members(
    db: Database,
    sweep_id: int,
    caller: Caller,
    check: Callable[[JobSpec], None],
    *,
    limits: Limits = Limits(),
    defaults: ShareDefaults = ShareDefaults(),
) -> tuple[Sweep, list[int]]:
    """Queues the sweep's points to run again (`check`: admission, for each spec); the
    sweep and the new members' ids. 409 when no point's latest member failed or was
    stopped early, or when the sweep changed meanwhile."""
    with db.read() as session:
        sweep = load_sweep(session, sweep_id)
        check_may_change_sweep(sweep, caller)
        if sweep.cancelled_at is not None:
            raise Conflict(
                f"sweep {sweep_id} was cancelled by {sweep.cancelled_by}: submit it again "
                "to run it anew"
            )
        again = to_run_again(list(session.connection().execute(_members_of(sweep_id))))
        owner = caller if caller.name == sweep.owner else _owner(session, sweep.owner)
        held = sweep.held
    if not again:
        raise Conflict(f"sweep {sweep_id} has no failed or early-stopped member to run again")
    specs = [JobSpec.model_validate(row.spec) for row in again]
    for spec in specs:
        check(spec)
    with db.write_connection() as conn:
        now = to_run_again(list(conn.execute(_members_of(sweep_id))))
        if [row.id for row in now] != [row.id for row in again]:
            raise Conflict(f"sweep {sweep_id} changed meanwhile; run it again")
        made = _store_again(conn, sweep_id, owner, specs, again, limits, defaults)
        if held:  # queued like the sweep's other members: held until it is released
            conn.execute(update(JOB).where(JOB.c.id.in_(made)).values(held=True))
        record_in(conn, caller, sweep_id, made)
    return get_sweep(db, sweep_id), made


def _owner(session: Session, name: str) -> Caller:
    """The sweep's owner, as their own submission would be: their Unix account too."""
    unix_user = (
        session.connection().execute(select(USER.c.unix_user).where(USER.c.name == name)).scalar()
    )
    return Caller(name=name, admin=False, unix_user=unix_user)


def _members_of(sweep_id: int) -> Any:
    return _MEMBERS.where(JOB.c.sweep_id == sweep_id).order_by(JOB.c.id)


def to_run_again(members: Sequence[Any]) -> list[Any]:
    """The latest member of each point that failed or was stopped early, in order."""
    latest: dict[str, Any] = {}
    for row in members:  # in the order they were made: the last one wins
        latest[json.dumps(row.params, sort_keys=True)] = row
    return [
        row
        for row in latest.values()
        if row.status == JobStatus.failed or row.reason == Reason.early_stopped
    ]


def _store_again(
    conn: Connection,
    sweep_id: int,
    caller: Caller,
    specs: list[JobSpec],
    again: list[Any],
    limits: Limits,
    defaults: ShareDefaults,
) -> list[int]:
    batch = [
        submission(spec, caller, None, limits, defaults, sweep_id=sweep_id, params=row.params)
        for spec, row in zip(specs, again, strict=True)
    ]
    made = []
    for answer in store(conn, batch):
        if isinstance(answer, GpuqError):
            raise answer
        made.append(answer.row["id"])
    conn.execute(update(SWEEP).where(SWEEP.c.id == sweep_id).values(size=SWEEP.c.size + len(made)))
    return made


def record_in(conn: Connection, caller: Caller, sweep_id: int, made: list[int]) -> None:
    """The sweep's audit entry for the rerun (each new member has its own too)."""
    entry = {"at": utcnow(), "actor": caller.name, "action": "rerun",
             "target": f"sweep/{sweep_id}", "detail": {"members": made}}  # fmt: skip
    conn.execute(INSERT_AUDIT, [entry])
