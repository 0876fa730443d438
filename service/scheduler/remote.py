"""The scheduler in a process of its own, as `gpuq serve` runs it: `SchedulerProcess` starts
`python -P -m service.scheduler_process` beside the API and stands for it in the API's
process, so that scheduling and answering requests do not take turns on one interpreter
lock (BENCHMARKS.md, issue 31).

The two speak over a socket pair, in `multiprocessing.connection` messages:

    gpuq serve → scheduler    settings JSON   first: the settings gpuq serve was started with
                              wake            something changed (a submit, a cancel): step now
                              metrics         what only the scheduler knows, for /metrics
    scheduler → gpuq serve    ready           it holds the scheduler lock and has reconciled
                              error TEXT      it could not start (TEXT says why)
                              commit          it committed a write: long polls look again now
                              metrics TEXT    its histograms and warm pool, Prometheus's text

The scheduler's process dies with gpuq serve, even by `kill -9` (`PR_SET_PDEATHSIG`), so
the two stop together as one process did; it stops on its own when the socket closes.
"""

import contextlib
import logging
import os
import queue
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from multiprocessing.connection import Connection

from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from service.settings import Settings
from service.store.db import Database

log = logging.getLogger(__name__)

MODULE = "service.scheduler_process"
WAKE, METRICS, READY, ERROR, COMMIT = b"wake", b"metrics", b"ready", b"error", b"commit"
#: How long a scrape waits for the scheduler's part of /metrics before leaving it out.
METRICS_WAIT_S = 2.0
#: How long gpuq serve waits for its scheduler to stop (it finishes its step first).
STOP_WAIT_S = 40.0


def received(conn: Connection) -> Iterator[bytes]:
    """The messages that come on `conn`, until the other end closes it (either side)."""
    while True:
        try:
            yield conn.recv_bytes()
        except (EOFError, OSError):
            return


class SchedulerFailed(RuntimeError):
    """The scheduler's process could not start; says why."""


class SchedulerProcess:
    """The scheduler's process, as the API's process sees it: what `Service` asks of a
    scheduler (wake, alive, stop, metrics)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._proc: subprocess.Popen[bytes] | None = None
        self._socket: socket.socket | None = None
        self._conn: Connection | None = None  #: messages over a copy of `_socket`
        self._sending = threading.Lock()
        self._metrics: queue.Queue[bytes] = queue.Queue()

    def start(self, settings: Settings) -> None:
        """Starts the scheduler's process and waits until it schedules; `SchedulerFailed`
        if it cannot (another scheduler holds the lock)."""
        ours, theirs = socket.socketpair()
        with theirs:
            self._proc = subprocess.Popen(
                [sys.executable, "-P", "-m", MODULE, f"--control-fd={theirs.fileno()}"],
                pass_fds=(theirs.fileno(),),
                start_new_session=True,  # a Ctrl-C is for gpuq serve, which stops it
            )
        self._socket, self._conn = ours, Connection(os.dup(ours.fileno()))
        self._conn.send_bytes(settings.model_dump_json().encode())
        try:
            first = self._conn.recv_bytes()
        except (EOFError, OSError):
            first = ERROR + f" its process exited with {self._proc.wait()}".encode()
        if first != READY:
            self.stop()
            raise SchedulerFailed(first.removeprefix(ERROR).decode().strip())
        threading.Thread(target=self._follow, args=(self._conn,), daemon=True).start()

    def _follow(self, conn: Connection) -> None:
        """Reads what the scheduler tells, until its process ends."""
        for message in received(conn):
            if message == COMMIT:
                self._db.notices.notify()
            elif message.startswith(METRICS):
                self._metrics.put(message.removeprefix(METRICS))
        if self._conn is not None:  # not closed by `stop()`
            log.error("the scheduler's process ended; jobs are stored but none start")

    def _send(self, message: bytes) -> bool:
        conn = self._conn
        if conn is None:
            return False
        try:
            with self._sending:
                conn.send_bytes(message)
        except OSError:  # the process is gone: `alive()` says so
            return False
        return True

    def wake(self) -> None:
        self._send(WAKE)

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        """Closes the socket, which stops the scheduler after its step; SIGKILL if it has
        not stopped within `STOP_WAIT_S`. Running jobs go on."""
        conn, self._conn = self._conn, None
        if conn is not None and self._socket is not None:
            # A shutdown, not a close: it ends the reading thread's wait and sends the end
            # of the stream, which a close would not do while that thread still reads.
            with contextlib.suppress(OSError):  # the other end is gone already
                self._socket.shutdown(socket.SHUT_RDWR)
            with self._sending:
                conn.close()
            self._socket.close()
        proc = self._proc
        if proc is None:
            return
        try:
            proc.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            log.error("the scheduler's process did not stop within %g s; killed", STOP_WAIT_S)
            proc.kill()
            proc.wait()

    def metrics(self) -> Iterator[Metric]:
        """The scheduler's own metrics, asked of its process; none if it does not answer."""
        while not self._metrics.empty():  # a late answer to an earlier scrape
            self._metrics.get_nowait()
        if not self._send(METRICS):
            return
        try:
            text = self._metrics.get(timeout=METRICS_WAIT_S)
        except queue.Empty:
            log.warning("the scheduler did not give its metrics within %g s", METRICS_WAIT_S)
            return
        yield from text_string_to_metric_families(text.decode())
