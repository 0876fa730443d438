"""Writes as an attempt ends: the job ends for good (`finish`) or is queued again for a
retry or after a preemption (`requeue`); either way its usage is recorded and its GPUs are
freed."""

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlmodel import Session

from gpuq.contract.outcome import Outcome
from gpuq.contract.states import JobStatus, Reason
from service.jobs.writes.gate import JOB, transition
from service.jobs.writes.starts import free_allocations
from service.store.db import utcnow
from service.usage import ledger


def finish(session: Session, job_id: int, outcome: Outcome, log_tail: list[str]) -> bool:
    """Ends the job as `outcome` says, records its last attempt's usage and frees its GPUs;
    False if it had already ended."""
    now = utcnow()
    ledger.record_attempt(
        session, job_id, outcome.status.value, outcome.reason, final=True, ended=now
    )
    ended = transition(
        session,
        job_id,
        outcome.status,
        finished_at=now,
        reason=outcome.reason,
        message=outcome.message,
        exit_code=outcome.exit_code,
        exit_signal=outcome.signal,
        log_tail=log_tail,
    )
    free_allocations(session, job_id)
    return ended


def requeue(
    session: Session,
    job_id: int,
    outcome: Outcome,
    log_tail: list[str],
    delay_s: float,
    *,
    attempt: int,
    last_epoch: int | None,
    previous_attempts: Sequence[dict[str, Any]],
    preempted_by: int | None = None,
) -> bool:
    """Queues the job again after `delay_s`, recording how attempt `attempt` ended (its
    last epoch, after `previous_attempts`; the job that preempted it, for one preempted) and
    its usage, and frees its GPUs; False if another writer won."""
    preempted = outcome.reason == Reason.preempted
    now = utcnow()
    lost_s = ledger.record_attempt(
        session,
        job_id,
        "preempted" if preempted else "retried",
        outcome.reason,
        final=False,
        preempted_by=preempted_by,
        ended=now,
    )
    ended = _attempt_record(outcome, attempt, last_epoch, now, preempted_by, lost_s)
    retry_at = now + timedelta(seconds=delay_s)
    queued = transition(
        session,
        job_id,
        JobStatus.queued,
        previous_attempts=[*previous_attempts, ended],
        retry_at=retry_at,
        queued_at=retry_at,
        wait_reason=_requeued_why(outcome, attempt, delay_s),
        assigned_gpus=[],
        reason=None,
        message=None,
        exit_code=None,
        exit_signal=None,
        stop_reason=None,
        stop_sent_at=None,
        runner_pid=None,
        executor_job_id=None,
        log_tail=log_tail,
        preemptions=JOB.c.preemptions + (1 if preempted else 0),
        preempted_by=preempted_by if preempted else JOB.c.preempted_by,
    )
    free_allocations(session, job_id)
    return queued


def _attempt_record(
    outcome: Outcome,
    attempt: int,
    last_epoch: int | None,
    now: datetime,
    preempted_by: int | None,
    lost_s: float | None,
) -> dict[str, Any]:
    """How attempt `attempt` ended, as the job's `previous_attempts` keep it."""
    return {
        "attempt": attempt,
        "reason": outcome.reason,
        "message": outcome.message,
        "exit_code": outcome.exit_code,
        "last_epoch": last_epoch,
        "finished_at": now.isoformat(),
        "preempted_by": preempted_by,
        "lost_s": None if lost_s is None else round(lost_s, 1),
    }


def _requeued_why(outcome: Outcome, attempt: int, delay_s: float) -> str:
    """The wait reason of a job queued again after attempt `attempt` ended as `outcome`."""
    if outcome.reason == Reason.preempted:
        return f"queued again: {outcome.message}"
    return (
        f"retrying in {delay_s:g} s: attempt {attempt} failed ({outcome.reason}: {outcome.message})"
    )
