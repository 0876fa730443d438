"""Hears other processes' commits on PostgreSQL (LISTEN) and wakes this process's waiters.

Every write transaction notifies `postgres.CHANNEL`, which PostgreSQL delivers at commit
to every listening session, whichever host it is on. A thread listens on a connection of
its own and passes each notice to `CommitNotices`, so a long poll or an event stream in
an API-only process wakes when the scheduler (or another API process) changes a job.
While it listens, waiters need only a slow safety-net poll; when the connection fails it
reconnects, and waiters poll fast until it is back.
"""

import logging
import os
import select
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from service.store.commit_notices import HEARD_POLL_S, POLL_S, CommitNotices
from service.store.postgres import API_ONLY, CHANNEL

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger(__name__)

#: A quiet connection is checked this often: a server that went away may say nothing.
KEEPALIVE_S = 5.0
#: The wait before reconnecting after an error, doubling while the errors go on.
RETRY_S = 1.0
RETRY_MAX_S = 30.0


class ChangeListener:
    def __init__(
        self,
        connect: "Callable[[], psycopg.Connection[Any]]",
        notices: CommitNotices,
        origin: str,
    ) -> None:
        """`connect()` opens an autocommit psycopg connection; notices signed `origin`
        (this process's own commits, already told) are skipped."""
        self._connect = connect
        self._notices = notices
        self._origin = origin
        self._stopping = threading.Event()
        self._stop_r, self._stop_w = os.pipe()  # wakes the thread's select() to stop
        self._thread = threading.Thread(target=self._run, name="gpuq-listen", daemon=True)
        self.listening = threading.Event()  #: set while LISTEN is in place
        #: where jobs are scheduled: called when an `--api-only` process has committed
        self.on_api_commit: Callable[[], None] | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stops listening and closes the connection (idempotent)."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        os.write(self._stop_w, b"x")
        if self._thread.ident is not None:
            self._thread.join(timeout=10)
        os.close(self._stop_r)
        os.close(self._stop_w)

    def _run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                with self._connect() as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    if failures:
                        log.info("listening for other processes' changes again")
                    failures = 0
                    self._heard(listening=True)  # anything may have changed unheard before
                    self._listen(conn)
            except Exception as exc:  # any failure: the thread must live on and reconnect
                if not self._stopping.is_set():
                    level = logging.DEBUG if failures else logging.WARNING  # once an outage
                    log.log(level, "listening for changes failed (%s); polling meanwhile", exc)
                    failures += 1
            finally:
                self._heard(listening=False)
            self._stopping.wait(min(RETRY_S * 2 ** max(failures - 1, 0), RETRY_MAX_S))

    def _listen(self, conn: "psycopg.Connection[Any]") -> None:
        while True:
            ready, _, _ = select.select([conn.fileno(), self._stop_r], [], [], KEEPALIVE_S)
            if self._stop_r in ready:
                return
            if not ready:
                conn.execute("SELECT 1")  # raises if the server went away
            # Drain the whole batch (the generator holds the connection's lock until done).
            origins = [notice.payload for notice in conn.notifies(timeout=0)]
            others = [origin for origin in origins if origin != self._origin]
            if others:
                self._notices.notify()
            woken = self.on_api_commit
            if woken is not None and any(o.startswith(API_ONLY) for o in others):
                woken()

    def _heard(self, *, listening: bool) -> None:
        if listening:
            self.listening.set()
            self._notices.poll_s = HEARD_POLL_S
            if self.on_api_commit is not None:  # the scheduler looks for what went unheard
                self.on_api_commit()
        else:
            self.listening.clear()
            self._notices.poll_s = POLL_S
        self._notices.notify()
