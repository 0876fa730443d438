"""The launcher's warm pool: standby runners (`standby`), each with a warm training process,
kept ready for builtin jobs. Standard library only; runs in the launcher's one thread."""

import contextlib
import hashlib
import importlib.util
import json
import os
import selectors
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from worker import runner, standby

#: gpuq's code: what a warm process runs (`gpuq`, `worker`) and what starts it (`service`)
PACKAGES = ("gpuq", "service", "worker")
#: how often the pool looks for new code on disk while it waits
CODE_CHECK_S = 5.0
#: how long a take waits for the standby's answer before the job starts cold
TAKE_REPLY_S = 5.0
#: the longest wait between tries of standbys that cannot start (no TensorFlow)
MAX_BACKOFF_S = 300.0


@dataclass
class StandbyRunner:
    pid: int
    control: socket.socket
    pidfd: int
    worker: int | None = None  #: the warm process, once it has imported everything
    retired: bool = False
    heard: bytes = field(default=b"", repr=False)


class WarmPool:
    def __init__(
        self, size: int, selector: selectors.BaseSelector, reply: Callable[[dict[str, Any]], None]
    ) -> None:
        self.size = size
        self._selector = selector
        self._reply = reply
        self._standbys: dict[int, StandbyRunner] = {}
        self._failures = 0
        self._not_before = 0.0  #: no new standby before then (monotonic): backing off
        self._code = code_fingerprint() if size else ""
        self._checked = time.monotonic()

    # --- the launcher's loop ---------------------------------------------------------------

    def top_up(self) -> None:
        """Starts standbys until there are `size`, unless backing off."""
        if time.monotonic() < self._not_before:
            return
        while len(self._standbys) < self.size:
            self._start()

    def next_check_s(self) -> float | None:
        """How long the launcher may wait for input before the pool has something to do."""
        if not self.size:
            return None
        now = time.monotonic()
        waits = [CODE_CHECK_S - (now - self._checked)]
        if len(self._standbys) < self.size:
            waits.append(self._not_before - now)
        return max(0.0, min(waits))

    def check_code(self, *, now: bool = False) -> None:
        """Retires every standby if gpuq's code or TensorFlow changed on disk since they
        started (looked at every `CODE_CHECK_S`, or `now`)."""
        if not self.size or (not now and time.monotonic() - self._checked < CODE_CHECK_S):
            return
        self._checked = time.monotonic()
        code = code_fingerprint()
        if code == self._code:
            return
        self._code = code
        if self._standbys:
            self._reply({"warning": "gpuq's code changed on disk: warm processes restarted"})
        self.retire_all()

    def take(self, request: dict[str, Any]) -> int | None:
        """Hands `request` to a ready standby; its pid, which from now on is the job's
        runner, or None (none ready, or it failed to answer): start the job cold."""
        self.check_code(now=True)
        ready = next((s for s in self._standbys.values() if s.worker is not None), None)
        if ready is None:
            return None
        self._forget(ready)
        os.close(ready.pidfd)  # the launcher watches it as a runner from now on
        try:
            ready.control.setblocking(True)
            ready.control.settimeout(TAKE_REPLY_S)
            ready.control.sendall(_line(request))
            answer = ready.control.recv(64)
        except OSError:
            answer = b""
        ready.control.close()
        if not answer.startswith(b"taken"):
            _kill(ready.pid)
            os.waitpid(ready.pid, 0)
            return None
        return ready.pid

    def retire_all(self) -> None:
        """Ends every standby that has no job (they end their warm processes)."""
        for one in list(self._standbys.values()):
            one.retired = True
            del self._standbys[one.pid]
            self._selector.unregister(one.control)
            one.control.close()  # its end of input: it ends itself
        self._report()

    # --- standbys ------------------------------------------------------------------------------

    def _start(self) -> None:
        ours, theirs = socket.socketpair()

        def child() -> int:
            ours.close()
            detach(theirs.fileno())
            return standby.serve_as_standby(theirs)

        pid = runner.forked(child)
        theirs.close()
        one = StandbyRunner(pid, ours, os.pidfd_open(pid))
        self._standbys[pid] = one
        self._selector.register(ours, selectors.EVENT_READ, lambda _: self._heard(one))
        self._selector.register(one.pidfd, selectors.EVENT_READ, lambda _: self._ended(one))
        self._report()

    def _heard(self, one: StandbyRunner) -> None:
        chunk = one.control.recv(4096)
        if not chunk:  # it is ending; its exit follows
            self._selector.unregister(one.control)
            return
        one.heard += chunk
        *lines, one.heard = one.heard.split(b"\n")
        for line in lines:
            if line.startswith(b"ready "):
                one.worker = int(line.split()[1])
                self._failures = 0
                self._report()

    def _ended(self, one: StandbyRunner) -> None:
        self._selector.unregister(one.pidfd)
        os.close(one.pidfd)
        _, status = os.waitpid(one.pid, 0)
        if one.retired:
            return
        self._forget(one)
        one.control.close()
        if one.worker is None:  # it never got ready: back off before the next try
            self._failures += 1
            delay = min(MAX_BACKOFF_S, 2.0**self._failures)
            self._not_before = time.monotonic() + delay
            code = os.waitstatus_to_exitcode(status)
            self._reply(
                {
                    "warning": f"a warm training process could not start (exit {code}); next "
                    f"try in {delay:g} s. `python -m worker.warm` shows why"
                }
            )
        self._report()

    def _forget(self, one: StandbyRunner) -> None:
        """Takes `one` out of the pool and out of the launcher's loop."""
        del self._standbys[one.pid]
        for watched in (one.control, one.pidfd):
            if _watched(self._selector, watched):
                self._selector.unregister(watched)

    def _report(self) -> None:
        pool = [{"runner": s.pid, "worker": s.worker} for s in self._standbys.values()]
        self._reply({"pool": pool})


def code_fingerprint() -> str:
    """What changes when gpuq's code (its three packages) or TensorFlow is replaced on disk."""
    digest = hashlib.sha256()
    for package in _code_folders():
        for root, folders, files in os.walk(package):
            folders[:] = sorted(f for f in folders if f != "__pycache__")
            for name in sorted(f for f in files if f.endswith(".py")):
                info = os.stat(os.path.join(root, name))
                digest.update(f"{root}/{name} {info.st_mtime_ns} {info.st_size}\n".encode())
    for folder in _framework_folders():
        info = os.stat(folder)
        digest.update(f"{folder} {info.st_ino} {info.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _code_folders() -> list[str]:
    return [folder for name in PACKAGES for folder in _folders_of(name)]


def _framework_folders() -> list[str]:
    return _folders_of("tensorflow")


def _folders_of(package: str) -> list[str]:
    found = importlib.util.find_spec(package)  # finds it without importing it
    return list(found.submodule_search_locations or []) if found else []


def detach(keep: int) -> None:
    """In a process the launcher forked ahead of a job (a standby, a spare runner): no
    share of the launcher's stdin, stdout, pipes, sockets or pidfds, but `keep`."""
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    runner.close_inherited(keep)


def _watched(selector: selectors.BaseSelector, fileobj: Any) -> bool:
    try:
        selector.get_key(fileobj)
    except (KeyError, ValueError):
        return False
    return True


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"
