"""How big this box is for jobs: its cores and host memory, less what gpuq keeps for the
OS and itself (`GPUQ_RESERVED_*`), which no job is ever given."""

import os
from dataclasses import dataclass
from pathlib import Path

from service.settings import Settings

MEMINFO = Path("/proc/meminfo")


@dataclass(frozen=True)
class HostSize:
    """The box's cores and host memory: what gpuq may hand out, and all it has."""

    cpus: float  #: cores gpuq may hand out: the box's (or GPUQ_HOST_CPUS) less the reserve
    memory_mb: int  #: likewise for host memory, in MiB
    total_cpus: float  #: the box's cores (or GPUQ_HOST_CPUS)
    total_memory_mb: int  #: the box's host memory (or GPUQ_HOST_MEMORY_MB)


def host_size(settings: Settings) -> HostSize:
    """The box as `settings` size it (`GPUQ_HOST_CPUS`, `GPUQ_HOST_MEMORY_MB`), else as
    detected: the cores this process may run on and the kernel's MemTotal."""
    total_cpus = settings.host_cpus if settings.host_cpus is not None else detected_cpus()
    total_mb = (
        settings.host_memory_mb if settings.host_memory_mb is not None else detected_memory_mb()
    )
    return HostSize(
        cpus=max(0.0, total_cpus - settings.reserved_cpus),
        memory_mb=max(0, total_mb - settings.reserved_host_memory_mb),
        total_cpus=total_cpus,
        total_memory_mb=total_mb,
    )


def detected_cpus() -> float:
    """The cores this process may run on (its affinity: a container's or a cpuset's share,
    not the whole machine's)."""
    return float(len(os.sched_getaffinity(0)))


def detected_memory_mb(meminfo: Path = MEMINFO) -> int:
    """The kernel's MemTotal, in MiB."""
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024  # in kB
    raise OSError(f"no MemTotal in {meminfo}")
