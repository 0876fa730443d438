"""The scheduler: `reconcile` once at start, then on every wake

    ingest → reap → stop early → enforce → drain → place

`ingest` (ingest.py) turns running jobs' events into progress; `reap` (finishing.py)
judges the jobs that exited; `stop early` (early_stop.py) stops the sweep members their
sweep's rule finds hopeless; `enforce` (enforce.py, caps.py) applies memory caps, cancels
and time limits; `drain` (drain.py) frees GPUs once a finished job has really let go;
`place` (place.py, starting.py) plans the queue and starts what fits, and under
`GPUQ_PREEMPT` preempts for the first job that cannot (preempt.py, victim_choice.py). Where
a placed job runs is the executor's business (`service.executors`).

With many short jobs the scheduler's time goes to commits, so what happens for every job
is written once per step: `place` claims all it places in one transaction and launches
them once it has committed (`starting.batch`), outside the write lock that submissions
wait for; `ingest` and `reap` share one with the record of those launches
(`finishing.settle`).

Under an executor with a queue of its own (Slurm) the steps are

    follow → ingest → reap → stop early → stop_overdue → hand_over

(handover.py): the executor places and orders; gpuq hands it the queue and follows it.
Which list runs is chosen once, by what the executor can do (`steps.steps_for`).

It wakes when a job is submitted or cancelled (`wake()`), when the executor reports an
exit, every `active_poll_s` while jobs run so progress keeps flowing (`idle_poll_s` when
none do), and when the queue positions a plan left as they were are due to be rewritten.
It never blocks on a child.
"""

import logging
import time
from collections.abc import Iterator

from prometheus_client.core import Metric
from sqlmodel import select

from service.background import Background, logged
from service.executors import Executor, LocalExecutor
from service.gpus.registry import GpuRegistry
from service.scheduler.lock import SchedulerLock, SchedulerLocked
from service.scheduler.running import Activity, Books, MemoryRecord, Running
from service.scheduler.steps import steps_for
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
        self.books = Books(db, settings, gpus, executor or LocalExecutor(settings.runs_dir))
        self.steps = steps_for(self.books)
        self._loop = Background("gpuq-scheduler", self._tick)
        self._lock = SchedulerLock(db, settings.home)
        self._lock_checked = 0.0

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Takes the scheduler lock, reconciles the jobs left active, starts the loop thread."""
        self._lock.take()
        self.reconcile()
        self.books.executor.open(self.wake)
        self._lock_checked = time.monotonic()
        self._loop.start()

    def stop(self) -> None:
        """Stops scheduling; running jobs go on."""
        self._loop.stop()
        self.books.executor.close()
        self._lock.release()

    def wake(self) -> None:
        self._loop.wake()

    def alive(self) -> bool:
        return self._loop.alive()

    def _tick(self) -> float | None:
        """One step; how long to wait for the next (None: stop, the lock is lost)."""
        began = time.monotonic()
        if began - self._lock_checked >= LOCK_CHECK_S:
            self._lock_checked = began
            if not self._lock.held():
                # Another scheduler may take over now: two would start jobs twice.
                log.error("lost the scheduler lock (the database went away); stopping")
                return None
        logged(self.step, log, "scheduler step")
        books = self.books
        books.stats.step_seconds.observe(time.monotonic() - began)
        poll = books.settings.active_poll_s if books.running else books.settings.idle_poll_s
        wanted = self.steps.wanted_in_s()
        return poll if wanted is None else min(poll, wanted)

    # --- the steps ---------------------------------------------------------------------------

    def step(self) -> None:
        self.steps.step()

    def reconcile(self) -> None:
        """Takes back every job left starting/running (and, under a queueing executor, those
        handed over and still waiting there); `reap` settles those that ended."""
        books = self.books
        with books.db.read() as session:
            jobs = session.exec(select(Job).where(self.steps.taken_back())).all()
        for job in jobs:
            if not self.steps.requeue_unlaunched(job):
                self._adopt(job)

    def _adopt(self, job: Job) -> None:
        books = self.books
        assert job.id is not None
        interactive = job.spec.get("kind") == "session"
        alive = books.executor.adopt(job.id, job.attempt, job.executor_job_id, session=interactive)
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

    # --- what the API asks -----------------------------------------------------------------

    def metrics(self) -> Iterator[Metric]:
        """What only a running scheduler knows (`stats`); nothing from one never started."""
        if self._loop.started():
            yield from self.books.stats.collect(self.books.executor)
