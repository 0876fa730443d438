"""Starting placed jobs: claim each and its GPUs, work out its device plan, and hand it to
the executor; all the starts of one step in one write transaction (`batch`).

A start is a fork of about a millisecond, so it happens inside the transaction: the claim,
the start and the record of the launch commit together, or the runners just started are
killed. A crash between a start and the commit leaves a runner for a job the database still
calls queued; `Scheduler.reconcile` kills it at the next start-up.
"""

import logging
import signal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlmodel import Session

from gpuq.contract.device_plan import DevicePlan
from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus
from service.executors import Executor, Launch, LaunchError, Started
from service.jobs import writes
from service.jobs.writes import JOB, JobRow
from service.scheduler.placement import Placement
from service.scheduler.running import Activity, Books, MemoryRecord, Running
from service.store.db import utcnow
from service.team import run_as

log = logging.getLogger(__name__)

#: no training step is taken for hung sooner (a big model's first epoch ends with a
#: validation pass that compiles its own function)
MIN_STEP_TIMEOUT_S = 120.0


def device_plan(
    spec: JobSpec, indices: list[int], *, simulated: bool, headroom_mb: int, gpu_total_mb: int
) -> DevicePlan:
    """The device plan a worker applies: mode, GPUs and TensorFlow's cap per logical GPU.

    `gpu_total_mb` is the smallest assigned GPU's memory (0 where unknown), which bounds a
    whole-GPU job that splits its GPUs into `replicas_per_gpu` logical ones, and turns the
    cap into the fraction of a GPU that JAX takes.
    """
    res = spec.resources
    if not indices:
        return DevicePlan.cpu()
    limit = None
    if not res.memory_growth:
        if res.memory_mb is not None:
            limit = res.memory_mb - headroom_mb
        elif res.replicas_per_gpu > 1 and gpu_total_mb > headroom_mb:
            limit = gpu_total_mb - headroom_mb
    if limit is not None:
        limit //= res.replicas_per_gpu
    return DevicePlan(
        mode="sim" if simulated else "gpu",
        indices=tuple(indices),
        memory_limit_mb=limit,
        memory_growth=res.memory_growth,
        replicas_per_gpu=res.replicas_per_gpu,
        memory_total_mb=gpu_total_mb or None,
    )


def new_launch(
    books: Books, job_id: int, attempt: int, spec: JobSpec, devices: DevicePlan, **queueing: Any
) -> Launch:
    """Attempt `attempt` of a job, resuming from the one before, with a builtin job's step
    timeout. `queueing`: what a queueing executor orders and holds it by (`Launch`'s
    fields)."""
    return Launch(
        job_id,
        attempt,
        spec,
        devices,
        resume_from=attempt - 1 or None,
        step_timeout_s=max(books.settings.idle_after_s, MIN_STEP_TIMEOUT_S),
        collective_timeout_s=(
            spec.resources.collective_timeout_s or books.settings.collective_timeout_s
            if spec.resources.nodes > 1
            else None
        ),
        **queueing,
    )


def launch(books: Books, executor: Executor, attempt: Launch, unix_user: str | None) -> Started:
    """Hands `attempt` to `executor`, as whom it runs as; `LaunchError` if it cannot start
    (the job then fails, `launch_error`)."""
    return executor.start(run_as.launch_as(books.settings, books.db, attempt, unix_user))


@dataclass(frozen=True)
class _Launched:
    """A job started in a transaction not yet committed."""

    running: Running
    attempt: int
    runner_pid: int | None
    waited_s: float | None  #: a first attempt's time in the queue


class Starts:
    """The placed jobs one write transaction starts (`batch`)."""

    def __init__(self, books: Books, session: Session, launched: list[_Launched]) -> None:
        self.books = books
        self.session = session  #: the transaction, for the step's other writes
        self._launched = launched
        inventory = books.gpus.inventory
        self._totals = {d.index: d.memory_total_mb for d in inventory.devices}

    def start(self, placements: Sequence[Placement]) -> None:
        """Claims each placed job that is still queued on its GPUs, and starts it."""
        if not placements:
            return
        query = select(
            JOB.c.id, JOB.c.attempt, JOB.c.spec, JOB.c.unix_user, JOB.c.created_at, JOB.c.params
        )
        query = query.where(
            JOB.c.id.in_([p.job_id for p in placements]), JOB.c.status == JobStatus.queued
        )
        jobs = {row.id: row for row in self.session.connection().execute(query)}
        for placement in placements:
            if placement.job_id in jobs:  # else cancelled meanwhile
                self._start(jobs[placement.job_id], placement)

    def _start(self, job: JobRow, placement: Placement) -> None:
        books, session = self.books, self.session
        attempt = job.attempt + 1
        indices = list(placement.gpu_indices)
        if not writes.claim_for_start(session, job.id, attempt, indices, placement.memory_mb):
            return
        spec = JobSpec.model_validate(job.spec)
        devices = device_plan(
            spec,
            indices,
            simulated=books.gpus.inventory.simulated,
            headroom_mb=books.settings.gpu_headroom_mb,
            gpu_total_mb=min((self._totals[i] for i in indices), default=0),
        )
        try:
            started = launch(
                books,
                books.executor,
                new_launch(books, job.id, attempt, spec, devices, params=job.params),
                job.unix_user,
            )
        except LaunchError as exc:
            log.error("job %d: %s", job.id, exc)
            writes.fail_launch(session, job.id, str(exc))
            return
        running = Running(
            job.id,
            books.executor.run_dir(job.id, attempt),
            indices,
            MemoryRecord(placement.memory_mb),
            activity=Activity(
                exempt=spec.idle_exempt is not None, interactive=spec.kind == "session"
            ),
        )
        waited = (utcnow() - job.created_at).total_seconds() if attempt == 1 else None
        # Known before its launch is recorded: if that write fails, the runner is killed.
        self._launched.append(_Launched(running, attempt, started.runner_pid, waited))
        writes.record_launch(
            session, job.id, books.executor.name, started.executor_job_id, started.runner_pid
        )


@contextmanager
def batch(books: Books) -> Iterator[Starts]:
    """One write transaction for a step's writes and starts (`Starts.start`): committed,
    the jobs started run; rolled back, or if the commit fails, they are killed so that
    nothing runs that the database does not know."""
    launched: list[_Launched] = []
    try:
        with books.db.write() as session:
            yield Starts(books, session, launched)
    except BaseException:
        _abandon(books, launched)
        raise
    for started in launched:
        _took(books, started)


def _took(books: Books, started: _Launched) -> None:
    """The start is committed: the job runs."""
    job_id = started.running.job_id
    books.running[job_id] = started.running
    books.disowned.discard(job_id)
    if started.waited_s is not None:
        books.stats.queue_wait_seconds.observe(max(0.0, started.waited_s))
    log.info(
        "job %d: attempt %d started on GPUs %s by the %s executor (runner pid %s)",
        job_id,
        started.attempt,
        started.running.gpus or "none (CPU)",
        books.executor.name,
        started.runner_pid,
    )


def _abandon(books: Books, launched: list[_Launched]) -> None:
    """The starts were not committed: their runners go at once."""
    for started in launched:
        job_id = started.running.job_id
        log.error("job %d: its start was not recorded; killing its runner", job_id)
        books.executor.signal(job_id, signal.SIGKILL)
        books.disowned.add(job_id)  # its exit is reported once, for a job not running
