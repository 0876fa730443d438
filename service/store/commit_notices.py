"""Wakes waiting requests (long polls, event streams) when a write is committed.

Waiters still re-read the database: a notice only says "look now". This process's own
commits notify at once; other processes' commits arrive through LISTEN on PostgreSQL
(`change_listener`), in an `--api-only` process on SQLite through the write-ahead log
(`foreign_commits`), and in gpuq serve's API from its scheduler's process. Where nothing
tells of them (the listener reconnecting, no inotify), waiters poll at `POLL_S`.
"""

import asyncio
import contextlib
import threading
from collections.abc import Callable

#: How often a waiter looks at the database when no notice comes (writes by other processes).
POLL_S = 0.25
#: The same while other processes' commits are heard: a safety net only.
HEARD_POLL_S = 5.0


class CommitNotices:
    def __init__(self) -> None:
        #: How long a waiter trusts notices to come; the listener raises it while it hears
        #: every process's commits.
        self.poll_s = POLL_S
        self._lock = threading.Lock()
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = set()
        #: told of every notice too: the scheduler's process passes them on to gpuq serve's
        self._forward: Callable[[], None] | None = None

    def forward(self, to: Callable[[], None]) -> None:
        """Calls `to` on every notice from now on (from the committing thread)."""
        self._forward = to

    def notify(self) -> None:
        """Called from any thread after a commit."""
        if self._forward is not None:
            self._forward()
        with self._lock:
            waiters, self._waiters = self._waiters, set()
        for loop, future in waiters:
            with contextlib.suppress(RuntimeError):  # that loop has closed
                loop.call_soon_threadsafe(_settle, future)

    def arm(self) -> "asyncio.Future[None]":
        """A future settled by the next notice; arm before reading, then await it."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            self._waiters.add((loop, future))
        return future

    async def wait(self, future: "asyncio.Future[None]", timeout_s: float) -> None:
        """Waits for the armed notice, at most `timeout_s` (and at most `poll_s`)."""
        try:
            await asyncio.wait_for(asyncio.shield(future), min(timeout_s, self.poll_s))
        except TimeoutError:
            pass
        finally:
            self.disarm(future)

    def disarm(self, future: "asyncio.Future[None]") -> None:
        """Forgets an armed notice that will not be awaited."""
        with self._lock:
            self._waiters.discard((future.get_loop(), future))


def _settle(future: "asyncio.Future[None]") -> None:
    if not future.done():
        future.set_result(None)
