"""Storing a sweep: the sweep and all its members in one write transaction, so a sweep is
stored whole or not at all (a member over the owner's quota refuses the sweep)."""

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Table, insert, select

from gpuq.contract.sweep import SweepSpec
from service.errors import Conflict, GpuqError
from service.jobs.submit import INSERT_AUDIT, Limits, store, submission
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
) -> tuple[Sweep, bool]:
    """Stores the sweep and its members (queued jobs) owned by `caller`; with a known
    `idempotency_key` (per owner), returns the original sweep instead (False)."""
    accepted = spec.model_copy(
        update={"sweep": spec.sweep.model_copy(update={"seed": expansion.seed})}
    )
    body = accepted.model_dump(mode="json")
    key = None if idempotency_key is None else f"{caller.name}/{idempotency_key}"
    with db.write_connection() as conn:
        if key is not None:
            found = conn.execute(select(SWEEP).where(SWEEP.c.idempotency_key == key)).first()
            if found is not None:
                return _replay(dict(found._mapping), spec), False
        now = utcnow()
        row = conn.execute(
            insert(SWEEP)
            .values(
                name=spec.name,
                owner=caller.name,
                priority=spec.priority,
                spec=body,
                size=len(expansion.members),
                max_parallel=spec.sweep.max_parallel,
                held=False,
                warnings=expansion.warnings,
                idempotency_key=key,
                created_at=now,
            )
            .returning(*SWEEP.c)
        ).one()
        sweep_id = row.id
        batch = [
            submission(m.spec, caller, None, limits, sweep_id=sweep_id, params=m.params)
            for m in expansion.members
        ]
        for index, answer in enumerate(store(conn, batch)):
            if isinstance(answer, GpuqError):
                answer.message = f"member {index + 1} of {len(batch)}: {answer.message}"
                answer.args = (answer.message,)
                raise answer
        detail = {"name": spec.name, "members": len(batch)}
        target = f"sweep/{sweep_id}"
        conn.execute(
            INSERT_AUDIT,
            [
                {
                    "at": now,
                    "actor": caller.name,
                    "action": "submit",
                    "target": target,
                    "detail": detail,
                }
            ],
        )
    return Sweep.model_validate(dict(row._mapping)), True


def _replay(row: Mapping[str, Any], spec: SweepSpec) -> Sweep:
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
