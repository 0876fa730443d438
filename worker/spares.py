"""Spare runners: forked by the launcher ahead of their jobs, so that a job's start does not
wait for a fork.

Forking the launcher and letting the child reach its own session costs a millisecond or
more on an idle box and several on a busy one, and the scheduler waits for it on every
start. A spare has done both already: it leads a session of its own, holds nothing of the
launcher's but its end of one pipe, and waits there for the one request that makes it a
job's runner (`runner.become`, as a freshly forked runner would). The launcher hands it
the request, answers at once with its pid, and forks the next spare once it has been quiet
for a moment (`QUIET_S`).

A spare whose pipe closes with no request (the launcher retired it, or went away) exits.
"""

import contextlib
import json
import os
import signal
import time
from dataclasses import dataclass

from worker import runner
from worker.warm_pool import detach

#: How long the launcher must have started no job before it forks a spare.
QUIET_S = 0.01
#: How long after a fork failed the launcher tries again.
RETRY_S = 5.0


@dataclass
class Spare:
    pid: int
    requests: int  #: the launcher's end of the spare's pipe
    ready: int  #: readable once it leads its own session (empty: it died first)

    def hand(self, line: bytes) -> bool:
        """Makes the spare the runner of the job that `line` (a launcher request) asks
        for; False if it died meanwhile (it is reaped)."""
        try:
            if os.read(self.ready, 1) != b".":
                raise BrokenPipeError("the spare runner died before it was needed")
            with open(self.requests, "wb", closefd=False) as pipe:
                pipe.write(line)
        except OSError:
            self.retire()
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            return False
        self.retire()  # the request is whole: its end of the pipe is at its end
        return True

    def retire(self) -> None:
        """Closes the launcher's ends: a spare with no request exits."""
        for fd in (self.requests, self.ready):
            with contextlib.suppress(OSError):
                os.close(fd)


def fork() -> Spare:
    fds: list[int] = []
    try:
        fds += os.pipe()
        fds += os.pipe()
        requests, requests_end, readable, ready = fds

        def child() -> int:
            os.close(requests_end)
            os.close(readable)
            return _serve_as_spare(requests, ready)

        pid = runner.forked(child)
    except OSError:  # out of files or processes: nothing left open
        for fd in fds:
            os.close(fd)
        raise
    os.close(requests)
    os.close(ready)
    return Spare(pid, requests_end, readable)


def _serve_as_spare(requests: int, ready: int) -> int:
    """Runs in the spare: leads a session of its own, then waits for its request and
    becomes the job's runner; returns its exit code."""
    os.setsid()
    os.write(ready, b".")  # the session exists: signals to its group reach it
    os.close(ready)
    detach(requests)
    with open(requests, "rb") as pipe:
        line = pipe.read()
    if not line:  # retired
        return 0
    run = runner.become(json.loads(line))
    return runner.main(["worker.runner", str(run.path)])


class Spares:
    """Keeps `size` spare runners forked (none if 0), forking them once the launcher has
    started no job for `QUIET_S`: not in the very moment a runner starts its job's program,
    whose CPU a fork then would take on a busy box."""

    def __init__(self, size: int = 1) -> None:
        self.size = size
        self._idle: list[Spare] = []
        self._busy_at = 0.0  #: when the launcher last started a job (monotonic)

    def due_in_s(self) -> float | None:
        """How long until a spare is due to be forked; None if none is missing."""
        if len(self._idle) >= self.size:
            return None
        return max(0.0, self._busy_at + QUIET_S - time.monotonic())

    def top_up(self) -> None:
        """Forks the missing spares, if the launcher has been quiet long enough; if it
        cannot (out of processes or files), it tries again in `RETRY_S`, and each start
        forks its own runner meanwhile."""
        if self.due_in_s() != 0.0:
            return
        try:
            while len(self._idle) < self.size:
                self._idle.append(fork())
        except OSError:
            self._busy_at = time.monotonic() + RETRY_S - QUIET_S

    def take(self, line: bytes) -> int | None:
        """The pid of a spare that takes the request `line`; None if none could."""
        self._busy_at = time.monotonic()
        while self._idle:
            spare = self._idle.pop(0)
            if spare.hand(line):
                return spare.pid
        return None

    def retire_all(self) -> None:
        """Ends every idle spare."""
        for spare in self._idle:
            spare.retire()
            os.waitpid(spare.pid, 0)  # it exits as soon as it reads the end of its pipe
        self._idle.clear()
