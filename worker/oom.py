"""Counting the kernel's out-of-memory kills, so a SIGKILL can be told apart from one.

Reads this process's memory cgroup: `memory.events` (cgroup v2) or `memory.oom_control`
(v1). Best effort: None where neither is readable.
"""

from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def _cgroup_files(proc_cgroup: Path) -> list[Path]:
    files = []
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if controllers == "":  # cgroup v2
            files.append(CGROUP_ROOT / relative / "memory.events")
        elif "memory" in controllers.split(","):
            files.append(CGROUP_ROOT / "memory" / relative / "memory.oom_control")
    return files


def oom_kills(proc_cgroup: Path = PROC_CGROUP) -> int | None:
    """How many processes the kernel's OOM killer has killed in this cgroup so far."""
    for path in _cgroup_files(proc_cgroup):
        try:
            for line in path.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            continue
    return None
