"""Host processes as both sides see them: start times (for pid reuse), sessions and
descendants, and prctl(2) for the processes gpuq starts."""

import ctypes
import os
import signal
import socket
import struct
from collections.abc import Sequence

#: The modules the service starts worker code by (`python -P -m MODULE ...`): the launcher,
#: which forks a runner per job, and a runner started on its own. The doctor knows a job's
#: processes by them.
LAUNCHER_MODULE = "worker.launcher"
RUNNER_MODULE = "worker.runner"
_UCRED = struct.Struct("3i")  # the kernel's `struct ucred`: pid, uid, gid


def started_module(argv: Sequence[str]) -> str | None:
    """The module a Python command line runs (`python [-P] -m MODULE ...`), or None for a
    script, `-c` or no Python at all: words after those are the program's own."""
    words = iter(argv[1:])
    for word in words:
        if word == "-m":
            return next(words, None)
        if word in ("-X", "-W"):
            next(words, None)  # the option's value
        elif word == "-c" or not word.startswith("-"):
            return None
    return None


def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after the process's name (state, ppid, pgrp, session,
    ...), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            # comm (field 2) may contain spaces; fields after the closing paren are fixed
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (from /proc), or None if gone."""
    fields = _stat(pid)
    try:
        return None if fields is None else int(fields[19])
    except (IndexError, ValueError):
        return None


def never_hung_up() -> None:
    """Ignores SIGHUP: a terminal that became this process's (a job's, opened by mistake)
    can never end it by hanging up. The processes gpuq starts for jobs set it back."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


#: gpuq's own processes' `oom_score_adj`, where they may lower it (CAP_SYS_RESOURCE)...
SPARED_OOM_SCORE = -500
#: ...and its jobs' processes', which anyone may raise theirs to: when the box runs out of
#: memory, the kernel's OOM killer takes a job's process long before gpuq's
JOB_OOM_SCORE = 200


def spared_by_oom_killer() -> None:
    """Lowers this process's OOM score (`SPARED_OOM_SCORE`) where it may; the processes
    gpuq starts for jobs raise theirs (`JOB_OOM_SCORE`, `worker.fenced`), which needs no
    privilege, so a job is the OOM killer's choice before gpuq on every box."""
    set_oom_score(SPARED_OOM_SCORE)


def set_oom_score(score: int) -> bool:
    """Sets this process's `oom_score_adj`; False where the kernel refuses (lowering it
    takes CAP_SYS_RESOURCE)."""
    try:
        with open("/proc/self/oom_score_adj", "w") as adj:
            adj.write(str(score))
    except OSError:
        return False
    return True


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """The pid, uid and gid of the process at the other end of a Unix socket, as the
    kernel recorded them when it connected (or, for a listening socket, when it listened)."""
    pid, uid, gid = _UCRED.unpack(
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    )
    return pid, uid, gid


def process_session(pid: int) -> int | None:
    """The session of `pid` (its leader's pid), or None if it is gone or not visible from
    here. A job's runner leads a session of its own: every process the job starts is in it,
    whatever process groups a shell or a script makes inside."""
    try:
        return os.getsid(pid)
    except OSError:
        return None


def resident_bytes(pid: int) -> int | None:
    """The process's resident memory (from /proc), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return None


def _parents_and_sessions() -> dict[int, tuple[int, int]]:
    """Every visible process: pid -> (parent pid, session id), from /proc."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = _stat(name)
        if fields is not None:
            table[int(name)] = (int(fields[1]), int(fields[3]))
    return table


def session_and_descendants(leader: int) -> list[int]:
    """The processes of the session `leader` leads and every descendant of `leader`
    (those that left the session included), `leader` itself left out."""
    table = _parents_and_sessions()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    descendants: set[int] = set()
    todo = [leader]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in descendants:
                descendants.add(child)
                todo.append(child)
    members = {pid for pid, (_, sid) in table.items() if sid == leader}
    return sorted((members | descendants) - {leader})


def prctl(option: int, value: int, name: str) -> None:
    """prctl(2) `option` set to `value` for this process; OSError naming `name` if refused."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({name})")
