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
