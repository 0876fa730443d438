"""What a job's fence holds it to (`FenceLimits`), what it measured (`FenceUsage`), and what
every kind of fence can do (`Fences`): the terms the local executor speaks, whatever the
kernel underneath."""

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class FenceLimits:
    """The most a job may take of the box; None (or no GPUs) where it is not held.

    `cpus` is a CPU-time quota (1.5: one and a half cores' worth each period, on any
    cores); `cpuset` pins the job to those cores; `memory_mb` is host memory with no swap
    beside it (so a job over it meets the OOM killer instead of slowing the box to a
    crawl); `pids` is how many processes and threads it may have at once (a fork bomb
    stops there); `denied_gpus` are the `/dev/nvidia<minor>` nodes it may not open (only
    where `Fences.devices_fenced`).
    """

    cpus: float | None = None
    cpuset: tuple[int, ...] | None = None
    memory_mb: int | None = None
    pids: int | None = None
    denied_gpus: tuple[int, ...] = ()


@dataclass(frozen=True)
class FenceUsage:
    """What the kernel counted for a fence: its peak host memory (MiB, None where the
    kernel keeps no peak), the CPU time of every process that ever ran in it, how many of
    them the OOM killer took, and the memory limit they ran under (MiB; None: none)."""

    memory_peak_mb: int | None
    cpu_time_s: float | None
    oom_kills: int
    memory_limit_mb: int | None = None


class Fences(Protocol):
    """The box's job fences, one kind per gpuq process, chosen once by `open_fences`.

    A fence is named by its job (`job-<id>-<attempt>`) and found again by that name after
    a restart of gpuq (`names`). Every method takes a name that may not exist (a job
    started before fences, a fence already removed) and then does nothing.
    """

    #: "cgroup v2", "cgroup v1" or "none"
    kind: str
    #: where kind is "none": why, in one sentence with the fix
    why_none: str | None
    #: the folder the fences are made in, for people (v1: `.../<controller>/<parent>`);
    #: None where there are none
    location: str | None
    #: whether `FenceLimits.denied_gpus` is enforced (v1's devices controller)
    devices_fenced: bool

    def make(self, name: str, limits: FenceLimits) -> tuple[str, ...]:
        """Makes the fence (or sets the limits of the one already there); the cgroup
        folders a process joins by writing "0" to each one's `cgroup.procs`. OSError if
        the kernel refuses."""
        ...

    def members(self, name: str) -> list[int]:
        """The pids inside, double forks and new sessions included."""
        ...

    def signal(self, name: str, sig: int) -> None:
        """Sends `sig` to every process inside, a fork racing the signal included."""
        ...

    def kill(self, name: str) -> None:
        """SIGKILLs every process inside and returns once none is left (or it gave up)."""
        ...

    def usage(self, name: str) -> FenceUsage | None:
        """What the kernel counted for the fence; None if there is no such fence."""
        ...

    def remove(self, name: str) -> bool:
        """Removes the fence; False while a process remains inside (True if it is gone)."""
        ...

    def names(self) -> list[str]:
        """The fences that exist, made by this gpuq or one before it."""
        ...

    def close(self) -> None:
        """Removes what holds the fences (v1: gpuq's parent folders) if no fence is left in
        it: a gpuq that stops with no job running leaves nothing behind."""
        ...
