"""Storing a sweep: the sweep and all its members in one write transaction, so a sweep is
stored whole or not at all (a member over the owner's quota refuses the sweep)."""

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, Table, insert, select

from gpuq.contract.sweep import SweepSpec
from service.errors import Conflict, GpuqError
from service.jobs.batch_inserts import INSERT_AUDIT
from service.jobs.batch_store import store
from service.jobs.host_share import ShareDefaults
from service.jobs.submission import Limits, submission
from service.store.db import Database, utcnow
from service.store.tables import Sweep
from service.sweeps.expand import Expansion
from service.team.users import Caller

SWEEP: Table = Sweep.__table__  # type: ignore[attr-defined]


def create_sweep(
    db: Database,
    spec: SweepSpec,
    expansion: Expansion,
    caller: Caller,
    *,
    idempotency_key: str | None = None,
    limits: Limits = Limits(),
    defaults: ShareDefaults = ShareDefaults(),
) -> tuple[Sweep, bool]:
    """Stores the sweep and its members (queued jobs) owned by `caller`, each with the cores
    and host memory it gets (`defaults` where it names none); with a known
    `idempotency_key` (per owner), returns the original sweep instead (False)."""
    key = None if idempotency_key is None else f"{caller.name}/{idempotency_key}"
    with db.write_connection() as conn:
        if key is not None:
            found = conn.execute(select(SWEEP).where(SWEEP.c.idempotency_key == key)).first()
            if found is not None:
                return _stored_sweep(dict(found._mapping), spec), False
        now = utcnow()
        row = _insert_sweep(conn, spec, expansion, caller, key, now)
        _store_members(conn, row.id, expansion, caller, limits, defaults)
        _audit_submit(conn, row.id, spec.name, len(expansion.members), caller, now)
    return Sweep.model_validate(dict(row._mapping)), True


def _insert_sweep(
    conn: Connection,
    spec: SweepSpec,
    expansion: Expansion,
    caller: Caller,
    key: str | None,
    now: datetime,
) -> Row[Any]:
    """The sweep's own row, its spec as accepted (a random search's seed filled in)."""
    accepted = spec.model_copy(
        update={"sweep": spec.sweep.model_copy(update={"seed": expansion.seed})}
    )
    return conn.execute(
        insert(SWEEP)
        .values(
            name=spec.name,
            owner=caller.name,
            priority=spec.priority,
            spec=accepted.model_dump(mode="json"),
            size=len(expansion.members),
            max_parallel=spec.sweep.max_parallel,
            held=False,
            warnings=expansion.warnings,
            idempotency_key=key,
            created_at=now,
        )
        .returning(*SWEEP.c)
    ).one()


def _store_members(
    conn: Connection,
    sweep_id: int,
    expansion: Expansion,
    caller: Caller,
    limits: Limits,
    defaults: ShareDefaults,
) -> None:
    """Stores every member as a queued job; raises the first member's error, which names
    the member, and so refuses the whole sweep."""
    batch = [
        submission(m.spec, caller, None, limits, defaults, sweep_id=sweep_id, params=m.params)
        for m in expansion.members
    ]
    for index, answer in enumerate(store(conn, batch)):
        if isinstance(answer, GpuqError):
            answer.message = f"member {index + 1} of {len(batch)}: {answer.message}"
            answer.args = (answer.message,)
            raise answer


def _audit_submit(
    conn: Connection, sweep_id: int, name: str, members: int, caller: Caller, now: datetime
) -> None:
    """The sweep's own audit entry (each member has one too)."""
    detail = {"name": name, "members": members}
    entry = {
        "at": now,
        "actor": caller.name,
        "action": "submit",
        "target": f"sweep/{sweep_id}",
        "detail": detail,
    }
    conn.execute(INSERT_AUDIT, [entry])


def _stored_sweep(row: Mapping[str, Any], spec: SweepSpec) -> Sweep:
    """The sweep stored before under the same key, if it was the same sweep (a random
    search that named no seed matches the seed it was given)."""
    stored = SweepSpec.model_validate(row["spec"])
    if spec.sweep.seed is None:
        spec = spec.model_copy(
            update={"sweep": spec.sweep.model_copy(update={"seed": stored.sweep.seed})}
        )
    if spec.model_dump(mode="json") != row["spec"]:
        raise Conflict("Idempotency-Key was already used with a different sweep")
    return Sweep.model_validate(dict(row))
