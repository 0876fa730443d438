"""Reading and writing a cgroup's files, the same on v1 and v2: a cgroup is a folder, its
settings are files holding one value, its processes are listed in `cgroup.procs`."""

import contextlib
import errno
import os
import time
from collections.abc import Callable, Iterable

MIB = 1024 * 1024
#: the CPU quota's period, in microseconds (the kernel's default: 100 ms)
CPU_PERIOD_US = 100_000
#: the least quota the kernel takes (1 ms per period)
CPU_QUOTA_FLOOR_US = 1_000


def write_setting(folder: str, file: str, value: str) -> None:
    """Writes one value to a cgroup file; OSError if the kernel refuses it."""
    with open(os.path.join(folder, file), "w") as setting:
        setting.write(value)


def read_setting(folder: str, file: str) -> str | None:
    """A cgroup file's content, stripped; None if there is no such file (or folder)."""
    try:
        with open(os.path.join(folder, file)) as setting:
            return setting.read().strip()
    except (FileNotFoundError, NotADirectoryError):
        return None


def keyed_number(text: str | None, key: str) -> int | None:
    """The number after `key` in a file of "key value" lines (`memory.events`,
    `cpu.stat`, v1's `memory.oom_control`); None where the line is missing."""
    for line in (text or "").splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == key and words[1].isdigit():
            return int(words[1])
    return None


#: v1's "no limit" is the largest page count in bytes, about 2**63: anything this large
UNLIMITED_BYTES = 2**60


def limit_mb(text: str | None) -> int | None:
    """A memory limit file's figure in MiB: `memory.max`'s (v2: `max` for none) or
    `memory.limit_in_bytes`'s (v1: a huge number for none); None for no limit."""
    if text is None or not text.isdigit() or int(text) >= UNLIMITED_BYTES:
        return None
    return int(text) // MIB


def cpu_quota_us(cpus: float) -> int:
    """`cpus` cores' worth of CPU time per `CPU_PERIOD_US`, in microseconds."""
    return max(CPU_QUOTA_FLOOR_US, round(cpus * CPU_PERIOD_US))


def cpu_list(cores: Iterable[int]) -> str:
    """Cores as the kernel's `cpuset.cpus` takes them ("0,2,5")."""
    return ",".join(str(core) for core in sorted(set(cores)))


def pids_inside(folder: str) -> set[int]:
    """Every process (and on v1, thread) in the cgroup at `folder` and the cgroups below
    it; none if there is no such folder."""
    found: set[int] = set()
    for here, _, _ in os.walk(folder):
        for listing in ("cgroup.procs", "tasks"):
            text = read_setting(here, listing) or ""
            found.update(int(pid) for pid in text.split() if pid.isdigit())
    return found


def send_each(pids: Iterable[int], sig: int) -> None:
    """Sends `sig` to each pid; one that has ended meanwhile is passed over."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def remove_folder(folder: str) -> bool:
    """Removes a cgroup folder, the cgroups below it first; False while a process lives in
    one (the kernel says EBUSY), True once it is gone (or was never there)."""
    if not os.path.isdir(folder):
        return True
    for here, _, _ in os.walk(folder, topdown=False):
        try:
            os.rmdir(here)
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno in (errno.EBUSY, errno.ENOTEMPTY):
                return False
            raise
    return True


def awaited(condition: Callable[[], bool], timeout_s: float, step_s: float = 0.001) -> bool:
    """Whether `condition` came true within `timeout_s`, asked every `step_s` (doubling up
    to 20 ms, so a quick answer costs little and a slow one few wake-ups)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(step_s)
        step_s = min(step_s * 2, 0.02)
    return True
