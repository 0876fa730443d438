"""Writes for what users ask of a job: to cancel it, hold or release it, change its
priority."""

from sqlmodel import Session

from gpuq.contract.states import ACTIVE, JobStatus
from service.jobs.writes.gate import JOB, update_job
from service.store.db import utcnow


def request_cancel(session: Session, job_id: int) -> None:
    """Asks the scheduler to stop an active job (once)."""
    update_job(
        session,
        job_id,
        JOB.c.status.in_(ACTIVE),
        JOB.c.cancel_requested_at.is_(None),
        cancel_requested_at=utcnow(),
    )


def record_hold(session: Session, job_id: int, held: bool) -> bool:
    """Holds or releases a queued job; False unless it is queued."""
    return update_job(session, job_id, JOB.c.status == JobStatus.queued, held=held)


def record_priority(session: Session, job_id: int, priority: int) -> None:
    update_job(session, job_id, priority=priority)
