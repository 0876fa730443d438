"""Host processes as both sides see them: start times (for pid reuse) and process groups."""

import os
from collections.abc import Sequence

#: The modules the service starts worker code by (`python -P -m MODULE ...`): the launcher,
#: which forks a runner per job, and a runner started on its own. The doctor knows a job's
#: processes by them.
LAUNCHER_MODULE = "worker.launcher"
RUNNER_MODULE = "worker.runner"


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


def process_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (from /proc), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            # comm (field 2) may contain spaces; fields after the closing paren are fixed
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def process_group(pid: int) -> int | None:
    """The process group of `pid`, or None if it is gone or not visible from here."""
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def resident_bytes(pid: int) -> int | None:
    """The process's resident memory (from /proc), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return None
