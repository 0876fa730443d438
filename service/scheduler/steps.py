"""The scheduler's steps, chosen once, by what its executor can do (`steps_for`).

On this box gpuq places jobs itself (`OnThisBox`):

    ingest → reap → stop early → enforce → drain → reservation windows → place

Under an executor with a queue of its own (Slurm: `HandedOver`) the executor places and
orders; gpuq hands it the queue and follows it:

    follow → ingest → reap → stop early → stop overdue → hand over

Each kind also says which jobs `reconcile` takes back after a restart, and what a job
claimed but never launched means there.
"""

import logging
from typing import Protocol

from sqlalchemy import ColumnElement
from sqlmodel import col, or_

from gpuq.contract.states import ACTIVE, JobStatus
from service.executors import QueueingExecutor
from service.jobs import writes
from service.scheduler.caps import CapGuard
from service.scheduler.drain import drain
from service.scheduler.early_stop import EarlyStopper
from service.scheduler.enforce import enforce, stop_overdue
from service.scheduler.finishing import settle
from service.scheduler.handover import follow, hand_over
from service.scheduler.place import Placer
from service.scheduler.reservation_windows import Windows
from service.scheduler.running import Books
from service.store.tables import Job

log = logging.getLogger(__name__)


class Steps(Protocol):
    def step(self) -> None:
        """One pass of the steps, in order."""

    def taken_back(self) -> ColumnElement[bool]:
        """The jobs `reconcile` takes back after a restart."""

    def requeue_unlaunched(self, job: Job) -> bool:
        """Queues again a job a scheduler claimed and stopped before it launched; True if
        `job` was one (and so is not taken back)."""

    def wanted_in_s(self) -> float | None:
        """Seconds until a step is wanted whatever happens; None if none is."""


class OnThisBox:
    """gpuq places the queue on this box's GPUs and starts what fits."""

    def __init__(self, books: Books) -> None:
        self.books = books
        self.caps = CapGuard(books)
        self.placer = Placer(books)
        self.stopper = EarlyStopper(books)
        self.windows = Windows(books)

    def step(self) -> None:
        self.settle()
        self.stopper.check()
        self.enforce()
        drain(self.books)
        self.windows.step()
        self.place()

    def settle(self) -> None:
        """`ingest` then `reap`, in one write transaction."""
        settle(self.books)

    def enforce(self) -> None:
        enforce(self.books, self.caps)

    def place(self) -> None:
        self.placer.place()

    def taken_back(self) -> ColumnElement[bool]:
        return col(Job.status).in_(ACTIVE)

    def requeue_unlaunched(self, job: Job) -> bool:
        """On this box, a job `starting` with no run directory (made before anything
        runs) was claimed by a scheduler that stopped before it launched it
        (`starting.batch`): it is queued again as it was, no attempt spent."""
        books = self.books
        if job.status != JobStatus.starting or job.executor_job_id is not None:
            return False
        assert job.id is not None
        if books.executor.run_dir(job.id, job.attempt).path.exists():
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

    def wanted_in_s(self) -> float | None:
        return self.placer.wanted_in_s()


class HandedOver:
    """The executor (Slurm) places and orders; gpuq hands it every admitted job and
    follows what it does."""

    def __init__(self, books: Books, queue: QueueingExecutor) -> None:
        self.books = books
        self.queue = queue
        self.stopper = EarlyStopper(books)
        if books.settings.preempt != "off":
            log.warning(
                "GPUQ_PREEMPT=%s is ignored under an executor with a queue of its own: its "
                "own preemption (Slurm's PreemptMode=REQUEUE) is the path there",
                books.settings.preempt,
            )

    def step(self) -> None:
        follow(self.books, self.queue)
        self.settle()
        self.stopper.check()
        stop_overdue(self.books)
        hand_over(self.books, self.queue)

    def settle(self) -> None:
        settle(self.books)

    def taken_back(self) -> ColumnElement[bool]:
        """The active jobs, and those handed over and still waiting there."""
        handed = (col(Job.status) == JobStatus.queued) & col(Job.executor_job_id).isnot(None)
        return or_(col(Job.status).in_(ACTIVE), handed)

    def requeue_unlaunched(self, job: Job) -> bool:
        return False  # a job handed over is the executor's to start

    def wanted_in_s(self) -> float | None:
        return None


def steps_for(books: Books) -> OnThisBox | HandedOver:
    """The steps for `books.executor`'s kind: the one place the kind is asked."""
    queue = books.executor.own_queue()
    return OnThisBox(books) if queue is None else HandedOver(books, queue)
