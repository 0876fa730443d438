"""Jobs in the database: create, read, list, cancel, and the one gate for status changes."""

from collections.abc import Sequence
from typing import Any

from sqlalchemy import update
from sqlmodel import Session, col, select

from service.db import Database, utcnow
from service.errors import Conflict, Invalid, NotFound
from service.models import Job
from service.spec import JobSpec
from service.states import ACTIVE, ALLOWED_FROM, TERMINAL, JobStatus, Reason

_STAMP = {JobStatus.starting: "started_at", JobStatus.running: "running_at"}


def transition(session: Session, job_id: int, to: JobStatus, **values: Any) -> bool:
    """Moves a job to `to` if its current state allows it; False if another writer won.

    The WHERE clause is the state machine: a terminal state matches no predecessor set, so
    it never changes, and two racing writers cannot both succeed.
    """
    stamps = {_STAMP.get(to, "finished_at"): utcnow()} if to != JobStatus.queued else {}
    statement = (
        update(Job)
        .where(col(Job.id) == job_id, col(Job.status).in_(ALLOWED_FROM[to]))
        .values(status=to, **stamps, **values)
    )
    return session.execute(statement).rowcount == 1  # type: ignore[attr-defined]


def create_job(
    db: Database, *, spec: JobSpec, owner: str, idempotency_key: str | None = None
) -> tuple[Job, bool]:
    """Stores a new queued job; with a known `idempotency_key`, returns the original instead."""
    body = spec.model_dump(mode="json")
    with db.write() as session:
        if idempotency_key is not None:
            existing = session.exec(
                select(Job).where(Job.idempotency_key == idempotency_key)
            ).first()
            if existing is not None:
                if existing.spec != body:
                    raise Conflict("Idempotency-Key was already used with a different job spec")
                return existing, False
        job = Job(
            name=spec.name,
            owner=owner,
            priority=spec.priority,
            spec=body,
            gpu_count=spec.resources.gpu_count,
            memory_mb=spec.resources.memory_mb if spec.resources.gpu_count else None,
            idempotency_key=idempotency_key,
        )
        session.add(job)
        session.flush()
        return job, True


def _load(session: Session, job_id: int) -> Job:
    job = session.get(Job, job_id)
    if job is None:
        raise NotFound(f"job {job_id} not found")
    return job


def get_job(db: Database, job_id: int) -> Job:
    with db.read() as session:
        return _load(session, job_id)


def list_jobs(
    db: Database,
    *,
    statuses: Sequence[JobStatus] = (),
    owner: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> tuple[list[Job], str | None]:
    """Newest first; the cursor is the last id of the previous page."""
    query = select(Job).order_by(col(Job.id).desc()).limit(limit + 1)
    if statuses:
        query = query.where(col(Job.status).in_(statuses))
    if owner is not None:
        query = query.where(Job.owner == owner)
    if cursor is not None:
        if not cursor.isdigit() or len(cursor) > 18:
            raise Invalid(("query", "cursor"), "cursor is not one this server handed out")
        query = query.where(col(Job.id) < int(cursor))
    with db.read() as session:
        jobs = list(session.exec(query).all())
    if len(jobs) > limit:
        return jobs[:limit], str(jobs[limit - 1].id)
    return jobs, None


def cancel_job(db: Database, job_id: int) -> Job:
    """Cancels a queued job at once; asks the scheduler to stop an active one."""
    with db.write() as session:
        job = _load(session, job_id)
        if job.status in TERMINAL:
            raise Conflict(f"job {job_id} already ended ({job.status.value})")
        if job.status == JobStatus.queued:
            transition(
                session,
                job_id,
                JobStatus.cancelled,
                reason=Reason.cancelled_by_user,
                message="cancelled before it started",
                wait_reason=None,
            )
        else:
            session.execute(
                update(Job)
                .where(
                    col(Job.id) == job_id,
                    col(Job.status).in_(ACTIVE),
                    col(Job.cancel_requested_at).is_(None),
                )
                .values(cancel_requested_at=utcnow())
            )
    return get_job(db, job_id)
