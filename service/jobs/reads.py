"""Reading jobs: one (for a change, or for a poll without the ORM), or a page of them."""

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, text
from sqlmodel import Session, col, select

from gpuq.contract.states import JobStatus
from service.errors import NotFound
from service.public import readable_metrics
from service.store.db import Database
from service.store.pages import newest_first
from service.store.tables import Job, JobMetric

_JOB = Job.__table__  # type: ignore[attr-defined]
_ONE = select(_JOB).where(_JOB.c.id == bindparam("job_id"))  # built once: every poll runs it
_REVISION = select(_JOB.c.rev).where(_JOB.c.id == bindparam("job_id"))
_HIGHEST = text("SELECT MAX(rev) FROM job")


def load(session: Session, job_id: int) -> Job:
    job = session.get(Job, job_id)
    if job is None:
        raise NotFound(f"job {job_id} not found")
    return job


def get_job(db: Database, job_id: int) -> Job:
    with db.read() as session:
        return load(session, job_id)


def read_job(db: Database, job_id: int) -> dict[str, Any]:
    """One job's row, read without the ORM: every poll asks this, and the ORM's session
    and object cost more than the query."""
    with db.reader.connect() as conn:
        row = conn.execute(_ONE, {"job_id": job_id}).mappings().first()
    if row is None:
        raise NotFound(f"job {job_id} not found")
    return dict(row)


def read_revision(db: Database, job_id: int) -> int | None:
    """The job's revision (None if there is no such job): what a long poll reads each
    time it wakes, before it reads the whole row again."""
    with db.reader.connect() as conn:
        return conn.execute(_REVISION, {"job_id": job_id}).scalar()


def list_jobs(
    db: Database,
    *,
    statuses: Sequence[JobStatus] = (),
    owner: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> tuple[list[Job], str | None]:
    """Newest first, filtered by state and owner, a page at a time."""
    query = select(Job)
    if statuses:
        query = query.where(col(Job.status).in_(statuses))
    if owner is not None:
        query = query.where(Job.owner == owner)
    return newest_first(db, query, Job.id, limit=limit, cursor=cursor)


def metric_history(db: Database, job_id: int) -> dict[str, list[dict[str, Any]]]:
    """Per-epoch metrics and sampled per-step metrics, each position once."""
    get_job(db, job_id)
    with db.read() as session:
        rows = session.exec(
            select(JobMetric)
            .where(JobMetric.job_id == job_id)
            .order_by(col(JobMetric.epoch), col(JobMetric.step))
        ).all()
    return {
        "epochs": [{"epoch": r.epoch, **_values(r)} for r in rows if r.step == 0],
        "steps": [{"epoch": r.epoch, "step": r.step, **_values(r)} for r in rows if r.step],
    }


def _values(row: JobMetric) -> dict[str, Any]:
    """A row's metrics; what is not a number, or would stand in for its position, reads as
    absent (stored before events were checked)."""
    values = readable_metrics(row.values)
    return {k: v for k, v in values.items() if k not in ("epoch", "step")}


def highest_revision(connection: Connection) -> int:
    """The highest revision of any job (0 with none): through the revision's index."""
    return connection.execute(_HIGHEST).scalar() or 0
