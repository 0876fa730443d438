"""The scheduler: `reconcile` once at start, then on every wake

    ingest → reap → stop early → enforce → drain → place

`ingest` (ingest.py) turns running jobs' events into progress; `reap` (finishing.py)
judges the jobs that exited; `stop early` (early_stop.py) stops the sweep members their
sweep's rule finds hopeless; `enforce` (enforce.py, caps.py) applies memory caps, cancels
and time limits; `drain` (drain.py) frees GPUs once a finished job has really let go;
`place` (place.py, starting.py) plans the queue and starts what fits, and under
`GPUQ_PREEMPT` preempts for the first job that cannot (preempt.py, preemption.py). Where
a placed job runs is the executor's business (`service.executors`).

With many short jobs the scheduler's time goes to commits, so what happens for every job
is written once per step: `place` claims all it places in one transaction and launches
them once it has committed (`starting.batch`), outside the write lock that submissions
wait for; `ingest` and `reap` share one with the record of those launches
(`finishing.settle`).

Under an executor with a queue of its own (Slurm) the steps are

    follow → ingest → reap → stop early → stop_overdue → hand_over

(handover.py): the executor places and orders; gpuq hands it the queue and follows it.

It wakes when a job is submitted or cancelled (`wake()`), when the executor reports an
exit, every `active_poll_s` while jobs run so progress keeps flowing (`idle_poll_s` when
none do), and when the queue positions a plan left as they were are due to be rewritten.
It never blocks on a child.
"""

import logging
import threading
import time
from collections.abc import Iterator

from prometheus_client.core import Metric
from sqlalchemy import ColumnElement
from sqlmodel import col, or_, select

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import ACTIVE, JobStatus
from service.executors import Executor, LocalExecutor, QueueingExecutor
from service.gpus.registry import GpuRegistry
from service.jobs import writes
from service.public import Preview
from service.scheduler.caps import CapGuard
from service.scheduler.drain import drain
from service.scheduler.early_stop import EarlyStopper
from service.scheduler.enforce import enforce, stop_overdue
from service.scheduler.finishing import settle
from service.scheduler.handover import follow, hand_over
from service.scheduler.lock import SchedulerLock, SchedulerLocked
from service.scheduler.place import Placer
from service.scheduler.running import Activity, Books, MemoryRecord, Running
from service.scheduler.snapshot import Active, active
from service.settings import Settings
from service.store.db import Database
from service.store.tables import Job

log = logging.getLogger(__name__)

#: how often the loop makes sure it still holds the scheduler lock (PostgreSQL's goes with
#: its connection)
LOCK_CHECK_S = 1.0

__all__ = ["Scheduler", "SchedulerLocked"]


class Scheduler:
    def __init__(
        self,
        db: Database,
        settings: Settings,
        gpus: GpuRegistry,
        executor: Executor | None = None,
    ) -> None:
        executor = executor or LocalExecutor(settings.runs_dir)
        if isinstance(executor, QueueingExecutor) and settings.preempt != "off":
            log.warning(
                "GPUQ_PREEMPT=%s is ignored under an executor with a queue of its own: its "
                "own preemption (Slurm's PreemptMode=REQUEUE) is the path there",
                settings.preempt,
            )
        self.books = Books(db, settings, gpus, executor)
        self.caps = CapGuard(self.books)
        self.placer = Placer(self.books)
        self.stopper = EarlyStopper(self.books)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = SchedulerLock(db, settings.home)

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Takes the scheduler lock, reconciles the jobs left active, starts the loop thread."""
        self._lock.take()
        self.reconcile()
        self.books.executor.open(self.wake)
        self._thread = threading.Thread(target=self._run, name="gpuq-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops scheduling; running jobs go on."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.books.executor.close()
        self._lock.release()

    def wake(self) -> None:
        self._wake.set()

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        settings = self.books.settings
        checked = time.monotonic()
        while not self._stopping.is_set():
            self._wake.clear()
            began = time.monotonic()
            if began - checked >= LOCK_CHECK_S:
                checked = began
                if not self._lock.held():
                    # Another scheduler may take over now: two would start jobs twice.
                    log.error("lost the scheduler lock (the database went away); stopping")
                    return
            try:
                self.step()
            except Exception:
                log.exception("scheduler step failed; trying again")
            self.books.stats.step_seconds.observe(time.monotonic() - began)
            poll = settings.active_poll_s if self.books.running else settings.idle_poll_s
            wanted = self.placer.wanted_in_s()
            self._wake.wait(poll if wanted is None else min(poll, wanted))

    # --- the steps ---------------------------------------------------------------------------

    def step(self) -> None:
        executor = self.books.executor
        if isinstance(executor, QueueingExecutor):
            # The executor places and orders; gpuq follows it and hands it the queue.
            follow(self.books, executor)
            self.ingest_and_reap()
            self.stopper.check()
            stop_overdue(self.books)
            hand_over(self.books, executor)
            return
        self.ingest_and_reap()
        self.stopper.check()
        self.enforce()
        self.drain()
        self.place()

    def reconcile(self) -> None:
        """Takes back every job left starting/running (and, under a queueing executor, those
        handed over and still waiting there); `reap` settles those that ended."""
        books = self.books
        taken: ColumnElement[bool] = col(Job.status).in_(ACTIVE)
        if isinstance(books.executor, QueueingExecutor):
            handed = (col(Job.status) == JobStatus.queued) & col(Job.executor_job_id).isnot(None)
            taken = or_(taken, handed)
        with books.db.read() as session:
            jobs = session.exec(select(Job).where(taken)).all()
        for job in jobs:
            assert job.id is not None
            if self._never_launched(job):
                continue
            interactive = job.spec.get("kind") == "session"
            alive = books.executor.adopt(
                job.id, job.attempt, job.executor_job_id, session=interactive
            )
            books.running[job.id] = Running(
                job_id=job.id,
                run=books.executor.run_dir(job.id, job.attempt),
                gpus=list(job.assigned_gpus),
                memory=MemoryRecord(
                    job.memory_mb,
                    job.gpu_memory_peak_mb or 0,
                    util_avg_pct=job.gpu_util_avg_pct,
                    util_samples=job.gpu_util_samples,
                ),
                offset=job.events_offset,
                # Idle again only after a full GPUQ_IDLE_AFTER_S seen by this scheduler.
                activity=Activity(
                    exempt=job.spec.get("idle_exempt") is not None, interactive=interactive
                ),
            )
            state = "re-adopted its live runner" if alive else "its runner is gone"
            log.info("job %d: %s after a restart", job.id, state)

    def _never_launched(self, job: Job) -> bool:
        """Queues again, as it was before, a job claimed by a scheduler that stopped before
        it launched it (`starting.batch`): on this box, `starting` with no run directory,
        which is made before anything runs. True if it was one."""
        books = self.books
        if isinstance(books.executor, QueueingExecutor) or job.status != JobStatus.starting:
            return False
        assert job.id is not None
        run = books.executor.run_dir(job.id, job.attempt)
        if job.executor_job_id is not None or run.path.exists():
            return False
        with books.db.write() as session:
            taken_back = writes.unclaim(session, job.id, job.attempt)
        if taken_back:
            log.warning(
                "job %d: claimed for attempt %d but never launched (gpuq stopped); queued again",
                job.id,
                job.attempt,
            )
        return True

    def ingest_and_reap(self) -> None:
        """`ingest` then `reap`, in one write transaction."""
        settle(self.books)

    def enforce(self) -> None:
        enforce(self.books, self.caps)

    def drain(self) -> None:
        drain(self.books)

    def place(self) -> None:
        self.placer.place()

    # --- what the API asks -----------------------------------------------------------------

    # A scheduler never started (an API-only process's, or the one gpuq serve's API keeps
    # beside its scheduler's process) runs no job: it reads what runs from the database.

    def preview(self, spec: JobSpec, owner: str) -> Preview:
        """Where `spec` would start if `owner` submitted it now, or why it would wait."""
        return self.placer.preview(spec, owner, self._elsewhere())

    def job_sessions(self) -> set[int]:
        """The sessions of the jobs running here (to tell foreign GPU processes)."""
        if (elsewhere := self._elsewhere()) is not None:
            return elsewhere.sessions
        return set(self.books.executor.job_sessions())

    def _elsewhere(self) -> Active | None:
        """What runs, as the database says, where this scheduler does not run the jobs."""
        return active(self.books.db) if self._thread is None else None

    def metrics(self) -> Iterator[Metric]:
        """What only a running scheduler knows (`stats`); nothing from one never started
        (an API-only process's)."""
        if self._thread is not None:
            yield from self.books.stats.collect(self.books.executor)

    @property
    def running_jobs(self) -> int:
        if (elsewhere := self._elsewhere()) is not None:
            return elsewhere.jobs
        return len(self.books.running)
