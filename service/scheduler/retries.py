"""Whether a failed attempt is tried again, and after how long (doubling back-off)."""

from typing import Any

from gpuq.contract.outcome import Outcome
from gpuq.contract.states import JobStatus, Reason
from service.settings import Settings

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


def retry_delay(
    outcome: Outcome, failures: int, spec: dict[str, Any], settings: Settings
) -> float | None:
    """Seconds until the next attempt of a job with `spec` whose attempts have failed
    `failures` times, this one included (preempted attempts are not failures), or None if
    this outcome is final."""
    if outcome.status != JobStatus.failed or outcome.reason not in RETRYABLE:
        return None
    if failures > int(spec.get("max_retries") or 0):
        return None
    delay = settings.retry_backoff_s * 2 ** max(0, failures - 1)
    return min(delay, settings.retry_backoff_max_s)
