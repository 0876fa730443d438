"""Host processes as both sides see them: start times (for pid reuse) and process groups."""

import os


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
