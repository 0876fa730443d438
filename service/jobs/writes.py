"""Every write to a job row, each a named function, beside the one gate for status.

`transition` is the state machine: a conditional UPDATE whose WHERE clause lists the
allowed predecessors. The other writes change what a job records (its GPUs, progress,
memory, why it was stopped) and never its status. All take the caller's write session and
write with Core statements (no autoflush: flush ORM changes first): the scheduler makes
them for every job it starts, ingests and reaps, where the ORM's bookkeeping would cost more
than the statement. Those it makes take plain values, not `Job` objects.
"""

from collections.abc import Sequence
from datetime import timedelta
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    ClauseElement,
    Row,
    Table,
    Update,
    bindparam,
    delete,
    insert,
    update,
)
from sqlmodel import Session

from gpuq.contract.outcome import Outcome
from gpuq.contract.states import ACTIVE, ALLOWED_FROM, JobStatus, Reason
from service.jobs.reads import highest_revision
from service.store.db import insert as upsert
from service.store.db import utcnow
from service.store.tables import Allocation, Job, JobMetric
from service.usage import ledger

_STAMP = {JobStatus.starting: "started_at", JobStatus.running: "running_at"}
JOB: Table = Job.__table__  # type: ignore[attr-defined]
ALLOCATION: Table = Allocation.__table__  # type: ignore[attr-defined]
#: some of a job's columns, read with Core (`select(JOB.c.id, ...)`)
JobRow = Row[*tuple[Any, ...]]


def transition(session: Session, job_id: int, to: JobStatus, **values: Any) -> bool:
    """Moves a job to `to` if its current state allows it; False if another writer won.

    The WHERE clause is the state machine: a terminal state matches no predecessor set, so
    it never changes, and two racing writers cannot both succeed.
    """
    stamps = {_STAMP.get(to, "finished_at"): utcnow()} if to != JobStatus.queued else {}
    values = {"status": to, **(stamps | values)}  # a stamp in `values` is the caller's
    if _reusable(values):
        return _set(session, job_id, to, values)
    return _update(session, job_id, JOB.c.status.in_(ALLOWED_FROM[to]), **values)


def _update(session: Session, job_id: int, *conditions: Any, **values: Any) -> bool:
    if not conditions and _reusable(values):
        return _set(session, job_id, None, values)
    statement = update(JOB).where(JOB.c.id == job_id, *conditions).values(**values)
    return session.connection().execute(statement).rowcount == 1


def _reusable(values: dict[str, Any]) -> bool:
    """Whether the statement built once for these columns (`_setting`) can set `values`:
    none of them is an SQL expression (`preemptions + 1`), which needs one of its own."""
    return not any(isinstance(value, ClauseElement) for value in values.values())


def _set(session: Session, job_id: int, to: JobStatus | None, values: dict[str, Any]) -> bool:
    """Sets the job's `values` (moving it to `to`, if given, from the states that allow
    it) with the statement built once for those columns: every start, event and exit runs
    some, and building one costs about three times what running it does."""
    params = {"job_": job_id, **{f"new_{column}": v for column, v in values.items()}}
    return session.connection().execute(_setting(tuple(values), to), params).rowcount == 1


@lru_cache(maxsize=256)  # one per call site's columns, in practice a few dozen
def _setting(columns: tuple[str, ...], to: JobStatus | None) -> Update:
    """The UPDATE that sets `columns` of the job `:job_` (moving it to `to`, from the states
    that allow it, if given), each from `:new_<column>`."""
    where = [JOB.c.id == bindparam("job_")]
    if to is not None:
        where.append(JOB.c.status.in_(ALLOWED_FROM[to]))
    settings = {c: bindparam(f"new_{c}", type_=JOB.c[c].type) for c in columns}
    return update(JOB).where(*where).values(settings)


# --- queued jobs ---------------------------------------------------------------------------


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


def set_wait_reasons(
    session: Session, changes: Sequence[dict[str, Any]], *, unchanged_since: int | None = None
) -> int:
    """Records why queued jobs wait and where they stand: `{"job_id", "why", "position"}`
    each, in one executemany (thousands of queued jobs, every scheduler step). With
    `unchanged_since` (the highest revision the plan read), only in rows no other writer
    changed since: a hold, a release or a new priority that came in while the plan was being
    made stays to be read, not hidden behind the plan's own write (`queued.QueueReader`).

    Each row takes its revision in the same UPDATE, the next ones above the highest there
    is (writers take turns: no other writer takes any meanwhile), where the trigger would
    give it one with an UPDATE of its own: a long queue's refresh of positions holds the
    write lock a third less. Returns the revision below them: theirs are the
    `len(changes)` above it (a job no longer queued leaves its own unused)."""
    connection = session.connection()
    base = highest_revision(connection)
    seen = _ANY_REVISION if unchanged_since is None else unchanged_since
    connection.execute(
        _WAIT_REASONS,
        [{**change, "rev": base + n, "seen": seen} for n, change in enumerate(changes, 1)],
    )
    return base


#: above every revision: no row is too new for the write
_ANY_REVISION = 2**31 - 1  # the column is a 32-bit INTEGER on PostgreSQL

_WAIT_REASONS = (
    update(JOB)
    .where(
        JOB.c.id == bindparam("job_id"),
        JOB.c.status == JobStatus.queued.value,
        JOB.c.rev <= bindparam("seen"),
    )
    .values(
        wait_reason=bindparam("why"), queue_position=bindparam("position"), rev=bindparam("rev")
    )
)


# --- starting ------------------------------------------------------------------------------


def claim_for_start(
    session: Session, job_id: int, attempt: int, gpu_indices: Sequence[int], memory_mb: int | None
) -> bool:
    """Moves a queued job to `starting` as attempt `attempt` on these GPUs and records its
    allocations; False if it is no longer queued (cancelled meanwhile)."""
    claimed = transition(
        session,
        job_id,
        JobStatus.starting,
        assigned_gpus=list(gpu_indices),
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
    _update(
        session, job_id, executor=executor, executor_job_id=executor_job_id, runner_pid=runner_pid
    )


def record_handover(
    session: Session, job_id: int, attempt: int, executor: str, executor_job_id: str
) -> bool:
    """A queueing executor (Slurm) took a queued job as attempt `attempt`; it stays queued
    until the executor starts it. False if it is no longer queued."""
    return _update(
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


# --- running -------------------------------------------------------------------------------


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
        _update(session, job_id, **values)
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
        _update(session, job_id, **values)


def record_utilisation(
    session: Session, job_id: int, average_pct: float | None, samples: int
) -> None:
    """The job's GPUs' average utilisation so far (NVML), over `samples` samples."""
    if samples and average_pct is not None:
        _update(session, job_id, gpu_util_avg_pct=round(average_pct, 1), gpu_util_samples=samples)


def record_placement_violation(
    session: Session, job_id: int, *, gpu: int, pids: Sequence[int], memory_mb: int, warning: str
) -> None:
    """The job's processes were seen on GPU `gpu`, which it was not given."""
    job = session.get(Job, job_id)
    if job is None:
        return
    seen = {"gpu": gpu, "pids": list(pids), "memory_mb": memory_mb}
    _update(
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
        _update(session, job_id, idle_since=None)
    else:
        _update(session, job_id, idle_since=utcnow(), warnings=[*job.warnings, warning])
    session.refresh(job)
    return job


def record_stop(session: Session, job_id: int, cause: Reason, detail: str | None = None) -> None:
    """The scheduler is stopping the job for `cause` (SIGTERM, or SIGKILL over its cap or
    off its GPUs); the first stop's cause is the one that counts."""
    values: dict[str, Any] = {"stop_reason": cause, "stop_sent_at": utcnow()}
    if detail is not None:  # a kill says what the job did, before the signal goes out
        values.update(reason=cause, message=detail)
    _update(session, job_id, JOB.c.stop_sent_at.is_(None), **values)


def record_preemption(session: Session, job_id: int, by: int) -> bool:
    """The scheduler is stopping the job (SIGTERM) for job `by`, which needs its GPUs; False
    if it is being stopped already (for that or another cause)."""
    return _update(
        session,
        job_id,
        JOB.c.stop_sent_at.is_(None),
        JOB.c.status.in_(ACTIVE),
        stop_reason=Reason.preempted,
        stop_sent_at=utcnow(),
        preempted_by=by,
    )


# --- finishing -----------------------------------------------------------------------------


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
    record = {
        "attempt": attempt,
        "reason": outcome.reason,
        "message": outcome.message,
        "exit_code": outcome.exit_code,
        "last_epoch": last_epoch,
        "finished_at": now.isoformat(),
        "preempted_by": preempted_by,
        "lost_s": None if lost_s is None else round(lost_s, 1),
    }
    retry_at = now + timedelta(seconds=delay_s)
    if preempted:
        why = f"queued again: {outcome.message}"
    else:
        why = (
            f"retrying in {delay_s:g} s: attempt {attempt} failed "
            f"({outcome.reason}: {outcome.message})"
        )
    queued = transition(
        session,
        job_id,
        JobStatus.queued,
        previous_attempts=[*previous_attempts, record],
        retry_at=retry_at,
        queued_at=retry_at,
        wait_reason=why,
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


# --- what users ask for --------------------------------------------------------------------


def request_cancel(session: Session, job_id: int) -> None:
    """Asks the scheduler to stop an active job (once)."""
    _update(
        session,
        job_id,
        JOB.c.status.in_(ACTIVE),
        JOB.c.cancel_requested_at.is_(None),
        cancel_requested_at=utcnow(),
    )


def record_hold(session: Session, job_id: int, held: bool) -> bool:
    """Holds or releases a queued job; False unless it is queued."""
    return _update(session, job_id, JOB.c.status == JobStatus.queued, held=held)


def record_priority(session: Session, job_id: int, priority: int) -> None:
    _update(session, job_id, priority=priority)
