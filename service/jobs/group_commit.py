"""Group commit: submissions from concurrent clients stored in shared write transactions.

One thread of its own stores them, a batch at a time: it takes every submission waiting
and runs each one's checks (`admit`), then, once the write lock is its own, takes (and
checks) those that came meanwhile, stores the batch in one transaction (`submit.store`:
each judged on its own, in order) and commits once. It answers each, and goes back for
what gathered meanwhile. So the batches grow with the load (and with the time the scheduler
holds the write lock), with no timer, and the checks, which may read files or ask Slurm,
run outside the write lock but for what came while it was awaited.

A request on the event loop awaits its answer (`submit_async`): the loop hands its
submission over and is told the answer, with no thread of its own per request. A thread
calls `submit` and blocks. Every answer comes after its batch's commit has returned: an
acknowledged job is on disk (SQLite `synchronous=FULL`; PostgreSQL's commit).
"""

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable

from sqlalchemy.exc import OperationalError

from service.errors import GpuqError, Unavailable
from service.jobs.batch_store import store
from service.jobs.submission import Stored, Submission
from service.store.db import Database

log = logging.getLogger(__name__)

#: The most submissions one transaction stores: keeps its `IN (...)` lists (up to 100
#: dependencies each) far inside SQLite's 32,766 variables.
MAX_BATCH = 100


class CommitFailed(Exception):
    """The commit itself failed: whether it happened cannot be told."""


def _admitted() -> None:
    """The checks of a submission that has none left."""


class Waiter:
    """One submission on its way: its checks, then its answer, told by `answered()`."""

    def __init__(
        self, submission: Submission, admit: Callable[[], None], answered: Callable[[], None]
    ) -> None:
        self.submission = submission
        self.admit = admit  #: raises the submission's GpuqError if it may not be stored
        self.answered = answered
        self.answer: Stored | GpuqError | None = None

    def result(self) -> Stored:
        if isinstance(self.answer, GpuqError):
            raise self.answer
        assert self.answer is not None
        return self.answer


class Submissions:
    """The submissions waiting to be stored, and the thread that stores them."""

    def __init__(self, db: Database, on_stored: Callable[[], None] = lambda: None) -> None:
        """`on_stored()` runs after each commit that created jobs (wakes the scheduler)."""
        self._db = db
        self._on_stored = on_stored
        self._lock = threading.Condition()
        self._waiting: list[Waiter] = []
        self._unanswered = 0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="gpuq submissions", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = 30) -> None:
        """Refuses new submissions (503) once those already waiting are stored."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        self._thread.join(timeout_s)

    def waiting(self) -> int:
        """How many submissions wait for their answer."""
        with self._lock:
            return self._unanswered

    def submit(self, submission: Submission, admit: Callable[[], None] = _admitted) -> Stored:
        """Stores `submission` with whatever else is waiting, once `admit()` (run by the
        storing thread) has not refused it; returns once that is committed.

        Raises the submission's own error (from `admit`, or Conflict, Invalid, TooMany), or
        Unavailable when the database failed its batch.
        """
        woken = threading.Event()
        me = self._queue(submission, admit, woken.set)
        woken.wait()
        return me.result()

    async def submit_async(
        self, submission: Submission, admit: Callable[[], None] = _admitted
    ) -> Stored:
        """`submit`, awaited on an event loop, which goes on meanwhile."""
        loop = asyncio.get_running_loop()
        answer = loop.create_future()

        def answered() -> None:
            # RuntimeError: the loop closed, and nobody awaits the answer any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, answer)

        me = self._queue(submission, admit, answered)
        await answer
        return me.result()

    def _queue(
        self, submission: Submission, admit: Callable[[], None], answered: Callable[[], None]
    ) -> Waiter:
        me = Waiter(submission, admit, answered)
        with self._lock:
            if self._closed:
                raise Unavailable("gpuq is shutting down; submit the job again in a moment")
            self._waiting.append(me)
            self._unanswered += 1
            self._lock.notify()
        return me

    def _run(self) -> None:
        """The storing thread: a batch at a time until closed with nothing waiting."""
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._waiting or self._closed)
                if not self._waiting:
                    return
            try:
                self._store_batch()
            except Exception:  # never this thread's end: what comes next must be stored
                log.exception("storing submissions failed")

    def _store_batch(self) -> None:
        """Stores one batch and answers it, whatever happens."""
        batch: list[Waiter] = []
        answers: list[Stored | GpuqError] = []
        try:
            answers = self._store(batch, take=True)
            if any(isinstance(answer, Stored) and answer.created for answer in answers):
                self._on_stored()
        finally:
            for index, waiter in enumerate(batch):
                found = answers[index] if index < len(answers) else None
                waiter.answer = found or Unavailable("the job was not stored; try again")
                self._answer(waiter)

    def _answer(self, waiter: Waiter) -> None:
        with self._lock:
            self._unanswered -= 1
        waiter.answered()

    def _take_admitted(self, room: int) -> list[Waiter]:
        """Up to `room` of those waiting, less those their checks refuse (answered now)."""
        with self._lock:
            taken, self._waiting = self._waiting[:room], self._waiting[room:]
        admitted = []
        for waiter in taken:
            try:
                waiter.admit()
            except GpuqError as refused:
                waiter.answer = refused
                self._answer(waiter)
            except Exception:
                log.exception("a submission's checks failed")
                waiter.answer = Unavailable("the job could not be checked; try again")
                self._answer(waiter)
            else:
                admitted.append(waiter)
        return admitted

    def _store(self, batch: list[Waiter], *, take: bool) -> list[Stored | GpuqError]:
        """One transaction for `batch`, answered in order. If it fails before its commit
        for a reason that may be one submission's rather than the database's, each is tried
        alone: one bad submission never fails another."""
        try:
            return self._transaction(batch, take=take)
        except CommitFailed as failed:
            error = failed.__cause__ or failed
        except OperationalError as exc:  # locked, unreachable, out of space: all alike
            error = exc
        except Exception as exc:
            if len(batch) > 1:
                log.warning("%d submissions failed together (%s); each alone now", len(batch), exc)
                return [answer for one in batch for answer in self._store([one], take=False)]
            error = exc
        log.error("could not store %d submission(s)", len(batch), exc_info=error)
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        message = f"the database did not store the job ({reason}); try again"
        return [Unavailable(message) for _ in batch]

    def _transaction(self, batch: list[Waiter], *, take: bool) -> list[Stored | GpuqError]:
        """Stores `batch` in one write transaction. With `take`, `batch` is first filled
        with those waiting and admitted, then, once the write lock is ours, with those
        that came while waiting for it."""
        if take:
            batch += self._take_admitted(MAX_BATCH)
            if not batch:  # all refused: those that came meanwhile are the next batch's
                return []
        committing = False
        try:
            with self._db.write_connection() as conn:
                if take:
                    batch += self._take_admitted(MAX_BATCH - len(batch))
                answers = store(conn, [waiter.submission for waiter in batch])
                committing = True
        except Exception as exc:
            if committing:
                raise CommitFailed("the commit failed") from exc
            raise
        return answers


def _resolve(answer: "asyncio.Future[None]") -> None:
    if not answer.done():  # not cancelled
        answer.set_result(None)
