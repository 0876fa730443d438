"""The inserts of a batch's new jobs, and of their audit entries, in the caller's write
transaction."""

from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Connection, Table, func, insert, select

from service.jobs.submission import Submission
from service.store.db import utcnow
from service.store.tables import AuditEntry, Job

JOB: Table = Job.__table__  # type: ignore[attr-defined]
AUDIT: Table = AuditEntry.__table__  # type: ignore[attr-defined]

#: PostgreSQL: a BEFORE trigger sets the new job's revision in the same write.
INSERT_JOB = insert(JOB).returning(JOB.c.id, JOB.c.rev)
#: SQLite: the insert gives the next revision itself (migration 0016: the AFTER trigger then
#: leaves the row alone, where it would write it again).
NEXT_REV = select(func.coalesce(func.max(JOB.c.rev), 0) + 1).scalar_subquery()
INSERT_JOB_WITH_REV = INSERT_JOB.values(rev=NEXT_REV)
INSERT_AUDIT = insert(AUDIT)


def insert_jobs(
    conn: Connection, batch: Sequence[Submission], webhooks: Mapping[str, str | None]
) -> list[dict[str, Any]]:
    """Inserts a queued job per submission, and its audit entry; their rows, in order."""
    if not batch:
        return []
    now = utcnow()
    defaults = _defaults()
    values = [{**defaults, **_job_columns(item, webhooks, now)} for item in batch]
    # One statement per job: SQLite runs a batch row by row anyway, and PostgreSQL's
    # ordered batch form casts each value to its declared type, for `status` an enum type
    # the migrations never made (the column is a VARCHAR). Each row is what was inserted,
    # with the id and revision the database gave it: reading every column back costs more.
    statement = INSERT_JOB_WITH_REV if conn.dialect.name == "sqlite" else INSERT_JOB
    rows = []
    for one in values:
        job_id, rev = conn.execute(statement, one).one()
        rows.append({**one, "id": job_id, "rev": rev})
    conn.execute(INSERT_AUDIT, [_audit_entry(row, now) for row in rows])
    return rows


def _job_columns(
    item: Submission, webhooks: Mapping[str, str | None], now: datetime
) -> dict[str, Any]:
    """The new job's columns that its submission sets."""
    spec, caller = item.spec, item.caller
    return {
        "name": spec.name,
        "owner": caller.name,
        "priority": spec.priority,
        "spec": item.body,
        "gpu_count": spec.resources.total_gpus,
        "memory_mb": spec.resources.memory_mb if spec.resources.gpu_count else None,
        "cpus": item.share.cpus,
        "host_memory_mb": item.share.host_memory_mb,
        "idempotency_key": item.key,
        "depends_on": list(spec.depends_on),
        "unix_user": caller.unix_user,
        "not_before": spec.not_before,
        "webhook_url": spec.webhook or webhooks.get(caller.name),
        "created_at": now,
        "sweep_id": item.sweep_id,
        "params": None if item.params is None else dict(item.params),
    }


@cache
def _defaults() -> Mapping[str, Any]:
    """A new job's columns as the model defaults them, but those the database gives (its id
    and revision); shared, so never changed (the insert only reads them)."""
    fields = Job.model_fields.items()
    given = ("id", "rev")
    return {n: f.get_default(call_default_factory=True) for n, f in fields if n not in given}


def _audit_entry(row: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """As `audit.record` writes it for a submission."""
    target = f"job/{row['id']}"
    return {
        "at": now,
        "actor": row["owner"],
        "action": "submit",
        "target": target,
        "detail": {"name": row["name"]},
    }
