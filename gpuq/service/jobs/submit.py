"""Storing a new job: quotas, dependencies, idempotency, the insert and its audit entry."""

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func
from sqlmodel import Session, col, select

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import TERMINAL, JobStatus
from gpuq.service.audit import record
from gpuq.service.db import Database
from gpuq.service.errors import Conflict, Forbidden, Invalid, TooMany
from gpuq.service.tables import Job, UserWebhook
from gpuq.service.users import Caller


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
            unix_user=caller.unix_user,
            not_before=spec.not_before,
            webhook_url=spec.webhook or _default_webhook(session, caller.name),
        )
        session.add(job)
        session.flush()
        session.refresh(job)  # its revision comes from a trigger
        record(session, caller.name, "submit", f"job/{job.id}", name=spec.name)
        return job, True


def _default_webhook(session: Session, owner: str) -> str | None:
    return session.exec(select(UserWebhook.url).where(UserWebhook.owner == owner)).first()


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
