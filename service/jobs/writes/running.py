"""Writes while a job runs: what its events said, what the scheduler saw of its GPUs, and
the scheduler's decision to stop it. None changes its status but `running`."""

from collections.abc import Sequence
from typing import Any

from sqlmodel import Session

from gpuq.contract.states import ACTIVE, JobStatus, Reason
from service.jobs.writes.gate import JOB, transition, update_job
from service.store.db import utcnow
from service.store.tables import Job, JobMetric
from service.store.upsert import upsert


def record_progress(
    session: Session,
    job_id: int,
    attempt: int,
    values: dict[str, Any],
    metrics: Sequence[tuple[int, int, dict]],
    *,
    now_running: bool,
) -> None:
    """Records what attempt `attempt`'s events said (`values`: progress, metrics,
    num_replicas, message, events_offset) and its metrics per `(epoch, step)`; with
    `now_running` (its training began and it is `starting`) the job becomes `running`."""
    if not (now_running and transition(session, job_id, JobStatus.running, **values)):
        update_job(session, job_id, **values)
    for epoch, step, recorded in metrics:
        _record_metrics(session, job_id, attempt, epoch, step, recorded)


def _record_metrics(
    session: Session, job_id: int, attempt: int, epoch: int, step: int, metrics: dict[str, Any]
) -> None:
    statement = upsert(session, JobMetric).values(
        job_id=job_id,
        attempt=attempt,
        epoch=epoch,
        step=step,
        values=metrics,
        recorded_at=utcnow(),
    )
    session.connection().execute(
        statement.on_conflict_do_update(
            index_elements=["job_id", "epoch", "step"],
            set_={"values": metrics, "attempt": attempt, "recorded_at": utcnow()},
        )
    )


def record_memory(
    session: Session, job_id: int, *, peak_mb: int | None = None, warning: str | None = None
) -> None:
    """A higher GPU memory peak, and a warning (over the cap under `GPUQ_OVER_CAP=warn`)."""
    values: dict[str, Any] = {}
    if peak_mb is not None:
        values["gpu_memory_peak_mb"] = peak_mb
    if warning is not None:
        job = session.get(Job, job_id)
        values["warnings"] = [*(job.warnings if job else []), warning]
    if values:
        update_job(session, job_id, **values)


def record_utilisation(
    session: Session, job_id: int, average_pct: float | None, samples: int
) -> None:
    """The job's GPUs' average utilisation so far (NVML), over `samples` samples."""
    if samples and average_pct is not None:
        update_job(
            session, job_id, gpu_util_avg_pct=round(average_pct, 1), gpu_util_samples=samples
        )


def record_host_usage(
    session: Session, job_id: int, memory_peak_mb: int | None, cpu_time_s: float | None
) -> None:
    """What the job's last attempt used of the box, as its fence measured it: its peak
    host memory and its CPU time."""
    if memory_peak_mb is not None or cpu_time_s is not None:
        cpu = round(cpu_time_s, 2) if cpu_time_s is not None else None
        update_job(session, job_id, host_memory_peak_mb=memory_peak_mb, cpu_time_s=cpu)


def record_placement_violation(
    session: Session, job_id: int, *, gpu: int, pids: Sequence[int], memory_mb: int, warning: str
) -> None:
    """The job's processes were seen on GPU `gpu`, which it was not given."""
    job = session.get(Job, job_id)
    if job is None:
        return
    seen = {"gpu": gpu, "pids": list(pids), "memory_mb": memory_mb}
    update_job(
        session,
        job_id,
        placement_violations=[*job.placement_violations, seen],
        warnings=[*job.warnings, warning],
    )


def record_idle(session: Session, job_id: int, warning: str | None) -> Job | None:
    """Declares the job idle (`warning` says why; the job as it is now) or, with None, no
    longer idle; None if it is gone."""
    job = session.get(Job, job_id)
    if job is None:
        return None
    if warning is None:
        update_job(session, job_id, idle_since=None)
    else:
        update_job(session, job_id, idle_since=utcnow(), warnings=[*job.warnings, warning])
    session.refresh(job)
    return job


def record_stop(session: Session, job_id: int, cause: Reason, detail: str | None = None) -> None:
    """The scheduler is stopping the job for `cause` (SIGTERM, or SIGKILL over its cap or
    off its GPUs); the first stop's cause is the one that counts."""
    values: dict[str, Any] = {"stop_reason": cause, "stop_sent_at": utcnow()}
    if detail is not None:  # a kill says what the job did, before the signal goes out
        values.update(reason=cause, message=detail)
    update_job(session, job_id, JOB.c.stop_sent_at.is_(None), **values)


def record_preemption(
    session: Session, job_id: int, by: int | None, detail: str | None = None
) -> bool:
    """The scheduler is stopping the job (SIGTERM) for job `by`, which needs its GPUs, or
    (None) for what `detail` says (a reservation's window opened); False if it is being
    stopped already (for that or another cause)."""
    said = {} if detail is None else {"message": detail}
    return update_job(
        session,
        job_id,
        JOB.c.stop_sent_at.is_(None),
        JOB.c.status.in_(ACTIVE),
        stop_reason=Reason.preempted,
        stop_sent_at=utcnow(),
        preempted_by=by,
        **said,
    )
