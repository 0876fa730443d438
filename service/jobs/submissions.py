"""Group commit: submissions from concurrent clients stored in shared write transactions.

Leader and followers, no thread of its own. A submitter that finds nobody storing leads:
once the write lock is its own, it takes every submission waiting (itself first), stores
them in one transaction (`submit.store`: each judged on its own, in order) and commits
once; those who arrive meanwhile wait. After the commit it answers its batch and hands the
lead to the first one waiting, who stores all that gathered meanwhile. So a lone client
pays no thread hand-off, and the batches grow with the load (and with the time the
scheduler holds the write lock), with no timer. Every answer comes after its batch's commit
has returned: an acknowledged job is on disk (SQLite `synchronous=FULL`; PostgreSQL's
commit).
"""

import logging
import threading
from collections.abc import Callable

from sqlalchemy.exc import OperationalError

from service.errors import GpuqError, Unavailable
from service.jobs.submit import Stored, Submission, store
from service.store.db import Database

log = logging.getLogger(__name__)

#: The most submissions one transaction stores: keeps its `IN (...)` lists (up to 100
#: dependencies each) far inside SQLite's 32,766 variables.
MAX_BATCH = 100


class CommitFailed(Exception):
    """The commit itself failed: whether it happened cannot be told."""


class Waiter:
    """One submission on its way: woken with its answer, or to lead."""

    def __init__(self, submission: Submission) -> None:
        self.submission = submission
        self.woken = threading.Event()
        self.answer: Stored | GpuqError | None = None

    def result(self) -> Stored:
        if isinstance(self.answer, GpuqError):
            raise self.answer
        assert self.answer is not None
        return self.answer


class Submissions:
    """The submissions waiting to be stored, and who stores them next."""

    def __init__(self, db: Database, on_stored: Callable[[], None] = lambda: None) -> None:
        """`on_stored()` runs after each commit that created jobs (wakes the scheduler)."""
        self._db = db
        self._on_stored = on_stored
        self._lock = threading.Condition()
        self._waiting: list[Waiter] = []
        self._leading = False
        self._closed = False

    def close(self, timeout_s: float = 30) -> None:
        """Refuses new submissions (503) once those already waiting are stored."""
        with self._lock:
            self._closed = True
            self._lock.wait_for(lambda: not self._leading, timeout_s)

    def waiting(self) -> int:
        """How many submissions wait to be stored."""
        with self._lock:
            return len(self._waiting)

    def submit(self, submission: Submission) -> Stored:
        """Stores `submission` with whatever else is waiting; returns once that is committed.

        Raises the submission's own error (Conflict, Invalid, TooMany), or Unavailable when
        the database failed its batch.
        """
        me = Waiter(submission)
        with self._lock:
            if self._closed:
                raise Unavailable("gpuq is shutting down; submit the job again in a moment")
            self._waiting.append(me)
            leads, self._leading = not self._leading, True
        if not leads:
            me.woken.wait()
        if me.answer is None:  # woken to lead: first in line, so in the batch it stores
            self._lead()
        return me.result()

    def _lead(self) -> None:
        """Stores one batch, answers it, and passes the lead on (or puts it down)."""
        batch: list[Waiter] = []
        try:
            answers = self._store(batch, take=True)
            for waiter, answer in zip(batch, answers, strict=True):
                waiter.answer = answer
            if any(isinstance(answer, Stored) and answer.created for answer in answers):
                self._on_stored()
        finally:
            for waiter in batch or self._take():  # none taken: something unforeseen failed
                waiter.answer = waiter.answer or Unavailable("the job was not stored; try again")
                waiter.woken.set()
            with self._lock:
                if self._waiting:
                    self._waiting[0].woken.set()
                else:
                    self._leading = False
                    self._lock.notify_all()

    def _take(self) -> list[Waiter]:
        with self._lock:
            batch, self._waiting = self._waiting[:MAX_BATCH], self._waiting[MAX_BATCH:]
            return batch

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
        if take and not batch:  # failed before taking: those waiting fail with it
            batch += self._take()
        log.error("could not store %d submission(s)", len(batch), exc_info=error)
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        message = f"the database did not store the job ({reason}); try again"
        return [Unavailable(message) for _ in batch]

    def _transaction(self, batch: list[Waiter], *, take: bool) -> list[Stored | GpuqError]:
        """Stores `batch` in one write transaction. With `take`, `batch` is first filled
        once the write lock is ours, so that all that came while waiting for it join."""
        committing = False
        try:
            with self._db.write_connection() as conn:
                if take:
                    batch += self._take()
                answers = store(conn, [waiter.submission for waiter in batch])
                committing = True
        except Exception as exc:
            if committing:
                raise CommitFailed("the commit failed") from exc
            raise
        return answers
