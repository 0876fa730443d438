"""How big a job's fence on this box is, and what its end says about it.

A job's fence (`fences`) holds what the job got (`Launch.cpus`, `Launch.host_memory_mb`):
its cores as a CPU quota, its host memory with no swap beside it, `GPUQ_PIDS_PER_CPU`
processes per core, and none of the box's GPUs but its own. A job that asked for no host
memory (and got no default) is still held to the box's less gpuq's reserve, so it can
never take the memory gpuq and the OS need; one that asked for no cores gets no quota.
"""

import hashlib
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from gpuq.contract.states import JobStatus, Reason
from service.executors.base import Launch, Verdict
from service.executors.fences import FenceLimits, Fences, FenceUsage
from service.host import HostSize


@dataclass(frozen=True)
class FencePolicy:
    """The box's fences and how a job's limits follow from its launch."""

    fences: Fences
    host: HostSize
    pids_per_cpu: int = 512
    #: the cores gpuq's jobs may run on: its own (a container's or a cpuset's share)
    all_cores: frozenset[int] = field(default_factory=lambda: frozenset(os.sched_getaffinity(0)))

    def limits(self, launch: Launch) -> FenceLimits:
        cores = launch.cpus if launch.cpus is not None else self.host.total_cpus
        return FenceLimits(
            cpus=launch.cpus,
            cpuset=self.cores_near(launch),
            memory_mb=launch.host_memory_mb or self.host.memory_mb,
            pids=self.pids_per_cpu * max(1, math.ceil(cores)),
            denied_gpus=tuple(sorted(set(launch.box_gpus) - set(launch.devices.indices))),
        )

    def cores_near(self, launch: Launch) -> tuple[int, ...] | None:
        """The cores a job may run on: those nearest its GPUs where the box has more than
        one NUMA node and they are enough for the cores it got; None (any) otherwise."""
        near = frozenset(launch.near_cores) & self.all_cores
        if not near or near == self.all_cores or (launch.cpus or 0) > len(near):
            return None
        return tuple(sorted(near))


def fence_parent(home: Path) -> str:
    """Where one gpuq keeps its jobs' fences on cgroup v1, apart from any other gpuq on the
    box (whose job 1 is another job 1): `gpuq-` and a digest of its state folder."""
    return "gpuq-" + hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:8]


def fence_name(job_id: int, attempt: int) -> str:
    """The name of attempt `attempt` of job `job_id`'s fence, found again by it after a
    restart."""
    return f"job-{job_id}-{attempt}"


def out_of_memory(usage: FenceUsage | None, asked_mb: int | None) -> Verdict | None:
    """The executor's word on a job the kernel's OOM killer struck inside its fence (None
    if it did not): the job went over its host memory, its own problem alone. `asked_mb`:
    the `host_memory_mb` it got (None: none, or not known after a restart, when the limit
    its fence holds is named instead)."""
    if usage is None or usage.oom_kills == 0:
        return None
    peak = f"; it peaked at {usage.memory_peak_mb} MiB" if usage.memory_peak_mb else ""
    if asked_mb:
        limit = f"host_memory_mb {asked_mb}"
    elif usage.memory_limit_mb:
        limit = f"{usage.memory_limit_mb} MiB"
    else:
        limit = "the box's memory less gpuq's reserve"
    return Verdict(
        JobStatus.failed,
        Reason.host_oom,
        f"the kernel stopped it at its host memory limit ({limit}{peak}): raise --host-mem "
        "(resources.host_memory_mb) or lower its memory use",
    )
