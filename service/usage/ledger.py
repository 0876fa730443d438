"""The usage ledger: one `attempt_usage` row for every attempt that ends, and each owner's
running total (`usage_total`), written in the transaction that ends the attempt, so the
numbers survive restarts and never count an attempt twice."""

from datetime import datetime
from types import SimpleNamespace
from typing import Any

from sqlalchemy import ScalarSelect, Table, bindparam, func, insert, select
from sqlmodel import Session

from gpuq.contract.states import ACTIVE
from service.store.db import utcnow
from service.store.tables import Job, JobMetric
from service.store.upsert import upsert
from service.store.usage_tables import AttemptUsage, UsageTotal
from service.usage import rollup

JOB: Table = Job.__table__  # type: ignore[attr-defined]
USAGE: Table = AttemptUsage.__table__  # type: ignore[attr-defined]
TOTAL: Table = UsageTotal.__table__  # type: ignore[attr-defined]
METRIC: Table = JobMetric.__table__  # type: ignore[attr-defined]

#: What a retried or preempted attempt's next attempt builds on: its last checkpoint.
RESUMED = frozenset({"preempted", "retried"})


#: What recording an attempt reads of its job, while it runs (built once: every exit).
_ATTEMPT = select(
    JOB.c.owner,
    JOB.c.attempt,
    JOB.c.gpu_count,
    JOB.c.assigned_gpus,
    JOB.c.created_at,
    JOB.c.queued_at,
    JOB.c.started_at,
).where(JOB.c.id == bindparam("job_id"), JOB.c.status.in_(ACTIVE))
_RECORD = insert(USAGE).returning(USAGE.c.id)


def record_attempt(
    session: Session,
    job_id: int,
    outcome: str,
    reason: str | None,
    *,
    final: bool,
    preempted_by: int | None = None,
    ended: datetime | None = None,
) -> float | None:
    """Records how the job's running attempt ended (`outcome`: its final status, or
    `retried` or `preempted` when it is queued again); the seconds of it since its last
    checkpoint (for an attempt that is resumed; 0 for a job's last), or None if the job
    was not running (nothing recorded). `ended`: when (default: now), the job's
    `finished_at` when it is its last attempt."""
    job = session.connection().execute(_ATTEMPT, {"job_id": job_id}).first()
    if job is None or job.started_at is None:
        return None
    ended = ended or utcnow()
    held = max(0.0, (ended - job.started_at).total_seconds())
    resumed = outcome in RESUMED
    since = (
        _since_checkpoint(session, job_id, job.attempt, job.started_at, ended) if resumed else 0.0
    )
    gpu_seconds = job.gpu_count * held
    if resumed:
        lost = job.gpu_count * since
    elif outcome == "failed":
        lost = gpu_seconds  # nothing comes of a job's last, failed attempt
    else:
        lost = 0.0
    write(
        session,
        {
            "job_id": job_id,
            "attempt": job.attempt,
            "owner": job.owner,
            "gpus": job.gpu_count,
            "gpu_indices": list(job.assigned_gpus),
            "queued_at": job.queued_at or job.created_at,
            "started_at": job.started_at,
            "ended_at": ended,
            "outcome": "failed" if outcome == "retried" else outcome,
            "reason": reason,
            "final": final,
            "gpu_seconds": gpu_seconds,
            "lost_gpu_seconds": lost,
            "preempted_by": preempted_by,
        },
    )
    if gpu_seconds > 0:
        _add_to_total(session, job.owner, gpu_seconds)
    return since


def write(session: Session, row: dict[str, Any]) -> None:
    """Writes a ledger row (every column of `attempt_usage` but its id) and adds it to the
    rollup."""
    usage_id = session.connection().execute(_RECORD, row).scalar_one()
    rollup.add_attempt(session, usage_id, rollup.held(SimpleNamespace(**row)))


def last_epoch_at(job_id: Any, attempt: Any) -> ScalarSelect[Any]:
    """When the attempt's last epoch (its last checkpoint) was recorded: job and attempt
    are values, or a query's columns."""
    return (
        select(func.max(METRIC.c.recorded_at))
        .where(METRIC.c.job_id == job_id, METRIC.c.attempt == attempt, METRIC.c.step == 0)
        .scalar_subquery()
    )


def _since_checkpoint(
    session: Session, job_id: int, attempt: int, started: datetime, ended: datetime
) -> float:
    """Seconds from the attempt's last reported epoch (its checkpoint), or its start, to
    `ended`."""
    last_epoch = session.connection().execute(select(last_epoch_at(job_id, attempt))).scalar()
    mark = started if last_epoch is None else max(started, last_epoch)
    return max(0.0, (ended - mark).total_seconds())


def _add_to_total(session: Session, owner: str, gpu_seconds: float) -> None:
    statement = upsert(session, UsageTotal).values(owner=owner, gpu_seconds=gpu_seconds)
    session.connection().execute(
        statement.on_conflict_do_update(
            index_elements=[TOTAL.c.owner],
            set_={"gpu_seconds": TOTAL.c.gpu_seconds + statement.excluded.gpu_seconds},
        )
    )
