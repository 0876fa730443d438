"""What tests ask of processes they did not start themselves (runners, training processes,
warm workers)."""

from pathlib import Path


def gone(pid: int) -> bool:
    """Whether `pid` has ended: no such process, or a zombie not yet reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"
