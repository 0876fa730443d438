"""Whether a failed attempt is tried again, and requeueing it with back-off."""

from datetime import timedelta

from sqlmodel import Session

from service.db import utcnow
from service.jobs import transition
from service.models import Job
from service.scheduler.outcome import Outcome
from service.settings import Settings
from service.states import JobStatus, Reason

#: Failures another attempt may get past. Not: a bad spec or a job too big for its cap
#: (it would fail the same way), nor a user's cancel or the time limit.
RETRYABLE = frozenset(
    {
        Reason.nonzero_exit,
        Reason.signal,
        Reason.worker_lost,
        Reason.launch_error,
        Reason.host_oom,
        Reason.device_mismatch,
    }
)


def retry_delay(outcome: Outcome, job: Job, settings: Settings) -> float | None:
    """Seconds until the next attempt, or None if this outcome is final."""
    if outcome.status != JobStatus.failed or outcome.reason not in RETRYABLE:
        return None
    if job.attempt > int(job.spec.get("max_retries") or 0):
        return None
    delay = settings.retry_backoff_s * 2 ** max(0, job.attempt - 1)
    return min(delay, settings.retry_backoff_max_s)


def requeue(session: Session, job: Job, outcome: Outcome, tail: list[str], delay_s: float) -> bool:
    """Queues `job` again, recording how this attempt ended; False if another writer won."""
    assert job.id is not None
    record = {
        "attempt": job.attempt,
        "reason": outcome.reason,
        "message": outcome.message,
        "exit_code": outcome.exit_code,
        "last_epoch": job.progress.get("epoch"),
        "finished_at": utcnow().isoformat(),
    }
    return transition(
        session,
        job.id,
        JobStatus.queued,
        previous_attempts=[*job.previous_attempts, record],
        retry_at=utcnow() + timedelta(seconds=delay_s),
        wait_reason=(
            f"retrying in {delay_s:g} s: attempt {job.attempt} failed "
            f"({outcome.reason}: {outcome.message})"
        ),
        assigned_gpus=[],
        reason=None,
        message=None,
        exit_code=None,
        stop_reason=None,
        stop_sent_at=None,
        runner_pid=None,
        log_tail=tail,
    )
