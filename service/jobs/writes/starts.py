"""Writes as a job starts: its claim on GPUs, its launch or hand-over to an executor, a
failed launch, and its GPUs given back."""

from collections.abc import Sequence

from sqlalchemy import bindparam, delete, insert
from sqlmodel import Session

from gpuq.contract.states import JobStatus, Reason
from service.jobs.writes.gate import ALLOCATION, JOB, transition, update_job


def claim_for_start(
    session: Session,
    job_id: int,
    attempt: int,
    gpu_indices: Sequence[int],
    memory_mb: int | None,
    placement: str | None = None,
    gpu_memory_total_mb: int | None = None,
) -> bool:
    """Moves a queued job to `starting` as attempt `attempt` on these GPUs and records its
    allocations, why the plan chose them (`placement`) and their memory (the smallest
    GPU's); False if it is no longer queued (cancelled meanwhile)."""
    claimed = transition(
        session,
        job_id,
        JobStatus.starting,
        assigned_gpus=list(gpu_indices),
        placement=placement or None,
        gpu_memory_total_mb=gpu_memory_total_mb,
        attempt=attempt,
        wait_reason=None,
        queue_position=None,
        events_offset=0,
    )
    if claimed and gpu_indices:
        session.connection().execute(
            insert(ALLOCATION),
            [{"job_id": job_id, "gpu_index": i, "memory_mb": memory_mb} for i in gpu_indices],
        )
    return claimed


def unclaim(session: Session, job_id: int, attempt: int) -> bool:
    """Takes back the claim of attempt `attempt` of a job that was never launched (only the
    scheduler, which does this at start-up, moves a `starting` job on): queued again as
    before it, no attempt spent, its GPUs freed; False if another writer won."""
    back = {"started_at": None} if attempt == 1 else {}
    taken = transition(
        session, job_id, JobStatus.queued, attempt=attempt - 1, assigned_gpus=[], **back
    )
    if taken:
        free_allocations(session, job_id)
    return taken


def record_launch(
    session: Session, job_id: int, executor: str, executor_job_id: str, runner_pid: int | None
) -> None:
    """The executor started the job: its id there, and its runner's pid (which leads the
    job's process group) where the runner is on this box."""
    update_job(
        session, job_id, executor=executor, executor_job_id=executor_job_id, runner_pid=runner_pid
    )


def record_handover(
    session: Session, job_id: int, attempt: int, executor: str, executor_job_id: str
) -> bool:
    """A queueing executor (Slurm) took a queued job as attempt `attempt`; it stays queued
    until the executor starts it. False if it is no longer queued."""
    return update_job(
        session,
        job_id,
        JOB.c.status == JobStatus.queued,
        attempt=attempt,
        executor=executor,
        executor_job_id=executor_job_id,
        events_offset=0,
        retry_at=None,
    )


def mark_started(session: Session, job_id: int) -> bool:
    """A handed-over job started where its executor put it: `starting`."""
    return transition(session, job_id, JobStatus.starting, wait_reason=None, queue_position=None)


def fail_launch(session: Session, job_id: int, message: str) -> None:
    """The executor could not start the job: it fails and gives its GPUs back."""
    transition(session, job_id, JobStatus.failed, reason=Reason.launch_error, message=message)
    free_allocations(session, job_id)


def free_allocations(session: Session, job_id: int) -> None:
    session.connection().execute(_FREE, {"job_id": job_id})


_FREE = delete(ALLOCATION).where(ALLOCATION.c.job_id == bindparam("job_id"))
