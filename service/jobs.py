"""Jobs in the database: create, read, list, cancel, and the one gate for status changes."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, update
from sqlmodel import Session, col, select

from service.audit import record
from service.db import Database, utcnow
from service.errors import Conflict, Forbidden, Invalid, NotFound, TooMany
from service.models import Job
from service.pages import newest_first
from service.spec import JobSpec
from service.states import ACTIVE, ALLOWED_FROM, TERMINAL, JobStatus, Reason
from service.users import Caller

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


@dataclass(frozen=True)
class Limits:
    """Per-user rules applied at submit (from settings)."""

    max_jobs_queued: int | None = None
    max_user_priority: int = 0


def create_job(
    db: Database,
    *,
    spec: JobSpec,
    caller: Caller,
    idempotency_key: str | None = None,
    limits: Limits = Limits(),
) -> tuple[Job, bool]:
    """Stores a new queued job owned by `caller`; with a known `idempotency_key` (per
    owner), returns the original instead."""
    body = spec.model_dump(mode="json")
    if spec.priority > limits.max_user_priority and not caller.admin:
        raise Forbidden(
            f"priority {spec.priority} is above {limits.max_user_priority}; only an admin may "
            "set it"
        )
    key = None if idempotency_key is None else f"{caller.name}/{idempotency_key}"
    with db.write() as session:
        if key is not None:
            existing = session.exec(select(Job).where(Job.idempotency_key == key)).first()
            if existing is not None:
                if existing.spec != body:
                    raise Conflict("Idempotency-Key was already used with a different job spec")
                return existing, False
        _check_dependencies(session, spec.depends_on)
        if limits.max_jobs_queued is not None:
            queued = session.exec(
                select(func.count())
                .select_from(Job)
                .where(Job.owner == caller.name, col(Job.status) == JobStatus.queued)
            ).one()
            if queued >= limits.max_jobs_queued:
                raise TooMany(
                    f"{caller.name} already has {queued} queued jobs, the most allowed "
                    f"(max_jobs_queued={limits.max_jobs_queued})"
                )
        job = Job(
            name=spec.name,
            owner=caller.name,
            priority=spec.priority,
            spec=body,
            gpu_count=spec.resources.gpu_count,
            memory_mb=spec.resources.memory_mb if spec.resources.gpu_count else None,
            idempotency_key=key,
            depends_on=list(spec.depends_on),
        )
        session.add(job)
        session.flush()
        session.refresh(job)  # its revision comes from a trigger
        record(session, caller.name, "submit", f"job/{job.id}", name=spec.name)
        return job, True


def _check_dependencies(session: Session, ids: Sequence[int]) -> None:
    if not ids:
        return
    found = {j.id: j for j in session.exec(select(Job).where(col(Job.id).in_(ids)))}
    for index, job_id in enumerate(ids):
        loc = ("body", "depends_on", index)
        if job_id not in found:
            raise Invalid(loc, f"job {job_id} does not exist")
        status = found[job_id].status
        if status in TERMINAL and status != JobStatus.succeeded:
            raise Invalid(
                loc, f"job {job_id} already ended {status.value}; this job could never start"
            )


def _load(session: Session, job_id: int) -> Job:
    job = session.get(Job, job_id)
    if job is None:
        raise NotFound(f"job {job_id} not found")
    return job


def get_job(db: Database, job_id: int) -> Job:
    with db.read() as session:
        return _load(session, job_id)


def read_job(db: Database, job_id: int) -> dict[str, Any]:
    """One job's row, read without the ORM: every poll asks this, and the ORM's session
    and object cost more than the query."""
    table = Job.__table__  # type: ignore[attr-defined]
    with db.reader.connect() as conn:
        row = conn.execute(select(table).where(table.c.id == job_id)).mappings().first()
    if row is None:
        raise NotFound(f"job {job_id} not found")
    return dict(row)


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


def cancel_queued(session: Session, job_id: int, reason: Reason, message: str) -> bool:
    """Ends a job that never started; False if it is no longer queued."""
    return transition(
        session,
        job_id,
        JobStatus.cancelled,
        reason=reason,
        message=message,
        wait_reason=None,
        queue_position=None,
    )


def _authorize(job: Job, caller: Caller) -> None:
    if not caller.admin and job.owner != caller.name:
        raise Forbidden(
            f"job {job.id} belongs to {job.owner}; only its owner or an admin may change it"
        )


def cancel_job(db: Database, job_id: int, caller: Caller) -> Job:
    """Cancels a queued job at once; asks the scheduler to stop an active one."""
    with db.write() as session:
        job = _load(session, job_id)
        _authorize(job, caller)
        if job.status in TERMINAL:
            raise Conflict(f"job {job_id} already ended ({job.status.value})")
        if job.status == JobStatus.queued:
            message = f"cancelled by {caller.name} before it started"
            cancel_queued(session, job_id, Reason.cancelled_by_user, message)
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
        record(session, caller.name, "cancel", f"job/{job_id}", status=job.status.value)
    return get_job(db, job_id)


def set_held(db: Database, job_id: int, caller: Caller, *, held: bool) -> Job:
    """Holds a queued job (it will not start) or releases it; 409 unless queued."""
    with db.write() as session:
        job = _load(session, job_id)
        _authorize(job, caller)
        changed = session.execute(
            update(Job)
            .where(col(Job.id) == job_id, col(Job.status) == JobStatus.queued)
            .values(held=held)
        ).rowcount  # type: ignore[attr-defined]
        if not changed:
            raise Conflict(f"job {job_id} is {job.status.value}; only a queued job can be held")
        record(session, caller.name, "hold" if held else "release", f"job/{job_id}")
    return get_job(db, job_id)


def set_priority(db: Database, job_id: int, caller: Caller, priority: int) -> Job:
    """Changes a job's priority: admins freely, owners only downwards."""
    with db.write() as session:
        job = _load(session, job_id)
        _authorize(job, caller)
        if job.status in TERMINAL:
            raise Conflict(f"job {job_id} already ended ({job.status.value})")
        old = job.priority
        if priority > old and not caller.admin:
            raise Forbidden(f"only an admin may raise a job's priority (now {old})")
        session.execute(update(Job).where(col(Job.id) == job_id).values(priority=priority))
        record(session, caller.name, "priority", f"job/{job_id}", old=old, new=priority)
    return get_job(db, job_id)
