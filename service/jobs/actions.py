"""What owners and admins do to a job: cancel it, hold or release it, change its priority.

Each checks who asks, changes the job through `writes`, and leaves an audit entry.
"""

from gpuq.contract.states import TERMINAL, JobStatus, Reason
from service.errors import Conflict, Forbidden
from service.jobs import writes
from service.jobs.reads import get_job, load
from service.store.db import Database
from service.store.tables import Job
from service.team.audit import record
from service.team.users import Caller


def _check_may_change_job(job: Job, caller: Caller) -> None:
    if not caller.manages(job.owner):
        raise Forbidden(
            f"job {job.id} belongs to {job.owner}; only its owner or an admin may change it"
        )


def cancel_job(db: Database, job_id: int, caller: Caller) -> Job:
    """Cancels a queued job at once; asks the scheduler to stop an active one."""
    with db.write() as session:
        job = load(session, job_id)
        _check_may_change_job(job, caller)
        if job.status in TERMINAL:
            raise Conflict(f"job {job_id} already ended ({job.status.value})")
        if job.status == JobStatus.queued:
            message = f"cancelled by {caller.name} before it started"
            writes.cancel_queued(session, job_id, Reason.cancelled_by_user, message)
        else:
            writes.request_cancel(session, job_id)
        record(session, caller.name, "cancel", f"job/{job_id}", status=job.status.value)
    return get_job(db, job_id)


def set_held(db: Database, job_id: int, caller: Caller, *, held: bool) -> Job:
    """Holds a queued job (it will not start) or releases it; 409 unless queued."""
    with db.write() as session:
        job = load(session, job_id)
        _check_may_change_job(job, caller)
        if not writes.record_hold(session, job_id, held):
            raise Conflict(f"job {job_id} is {job.status.value}; only a queued job can be held")
        record(session, caller.name, "hold" if held else "release", f"job/{job_id}")
    return get_job(db, job_id)


def set_priority(db: Database, job_id: int, caller: Caller, priority: int) -> Job:
    """Changes a job's priority: admins freely, owners only downwards."""
    with db.write() as session:
        job = load(session, job_id)
        _check_may_change_job(job, caller)
        if job.status in TERMINAL:
            raise Conflict(f"job {job_id} already ended ({job.status.value})")
        old = job.priority
        if priority > old and not caller.admin:
            raise Forbidden(f"only an admin may raise a job's priority (now {old})")
        writes.record_priority(session, job_id, priority)
        record(session, caller.name, "priority", f"job/{job_id}", old=old, new=priority)
    return get_job(db, job_id)
