"""A launched job as the scheduler tracks it: its runner, run directory and memory."""

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from service.scheduler.gpu_guard import MemoryWatch
from worker.rundir import RunDir
from worker.runner import process_start_ticks

LOG_TAIL_LINES = 50


@dataclass
class Watch:
    """A launched job's runner, which leads its own process group."""

    job_id: int
    run: RunDir
    pid: int
    gpus: list[int]
    memory: MemoryWatch
    offset: int = 0
    proc: subprocess.Popen[bytes] | None = None  #: None for a runner adopted after a restart
    start_ticks: int | None = None
    killed: bool = False

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        ticks = process_start_ticks(self.pid) if self.pid > 0 else None
        return ticks is not None and self.start_ticks in (None, ticks)

    def signal(self, sig: signal.Signals) -> None:
        if self.pid > 0:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig)


def tail_log(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last lines of a job's log (read from its last 64 KiB)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode(errors="replace")
    except FileNotFoundError:
        return []
    return text.splitlines()[-lines:]
