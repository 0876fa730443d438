"""Who a GPU's processes are: their user, command line, and the gpuq job they belong to,
read from /proc (NVML gives pids alone)."""

import os
import pwd
import re
from dataclasses import dataclass
from pathlib import Path

from gpuq.contract.processes import LAUNCHER_MODULE, RUNNER_MODULE, process_session, started_module

#: A runner's run directory, `.../runs/<job>/<attempt>`: the end of its command line, or its
#: working directory when the launcher forked it (and it kept the launcher's command line).
_RUN_DIR = re.compile(r"/runs/(\d+)/\d+/?$")
COMMAND_CHARS = 120


@dataclass(frozen=True)
class ProcessFacts:
    pid: int
    memory_mb: int
    user: str | None  #: None: not visible from here (another PID namespace)
    command: str | None
    job_id: int | None  #: the gpuq job whose session it is in; None: foreign

    def describe(self) -> str:
        if self.user is None:
            return f"pid {self.pid}: {self.memory_mb} MiB, not visible here"
        whose = f"gpuq job {self.job_id}" if self.job_id is not None else "foreign"
        return f"pid {self.pid} ({whose}, {self.user}: {self.command}): {self.memory_mb} MiB"


def facts(pid: int, memory_mb: int) -> ProcessFacts:
    proc = Path(f"/proc/{pid}")
    try:
        status = (proc / "status").read_text()
        argv = (proc / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return ProcessFacts(pid, memory_mb, None, None, None)
    uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
    command = " ".join(a.decode(errors="replace") for a in argv if a)
    if len(command) > COMMAND_CHARS:
        command = command[: COMMAND_CHARS - 1] + "…"
    return ProcessFacts(pid, memory_mb, _user(uid), command, _job_of(pid))


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _job_of(pid: int) -> int | None:
    """The job whose runner leads `pid`'s session (every job has its own)."""
    group = process_session(pid)
    if group is None:
        return None
    try:
        argv = Path(f"/proc/{group}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    words = [a.decode(errors="replace") for a in argv if a]
    module = started_module(words)
    if module == RUNNER_MODULE:
        match = _RUN_DIR.search(words[-1])
    elif module == LAUNCHER_MODULE:
        try:
            match = _RUN_DIR.search(os.readlink(f"/proc/{group}/cwd"))
        except OSError:
            return None
    else:
        return None
    return int(match.group(1)) if match else None
