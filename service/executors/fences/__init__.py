"""A job's fence: the kernel, not a polite request, holds each job to what it got.

Every job runs in cgroups of its own, made by gpuq before the job's first instruction
(its runner joins them while still root) and removed after it ends. A fence holds the job
to (`FenceLimits`):

- `cpus`: a CPU-time quota, cores' worth per 100 ms period, on whichever cores are free
  (v1 `cpu.cfs_quota_us`/`cpu.cfs_period_us`; v2 `cpu.max`);
- `cpuset`: the cores it may run on at all, those near its GPUs (`cpuset.cpus`);
- `memory_mb`: host memory with no swap beside it, so a job over it meets the kernel's
  OOM killer inside its own fence instead of taking a neighbour's memory or slowing the
  box (v1 `memory.limit_in_bytes` and `memory.memsw.limit_in_bytes`; v2 `memory.max` and
  `memory.swap.max` 0);
- `pids`: how many processes and threads it may have at once (`pids.max`);
- `denied_gpus`: the `/dev/nvidia<minor>` nodes of GPUs that are not its own (v1
  `devices.deny`; not on v2).

One kind per box, chosen once by `open_fences`:

- cgroup v2 (`v2.CgroupV2Fences`), where gpuq was delegated a subtree of the unified
  hierarchy (systemd's `Delegate=yes`): a fence is one folder, `<root>/jobs/<name>`, the root
  being the companion unit's cgroup that `GPUQ_FENCE_CGROUP` names (deploy/gpuq-jobs.service:
  jobs out of gpuq's own unit, so that systemd can restart gpuq while they run), or else
  gpuq's own cgroup.
- cgroup v1 (`v1.CgroupV1Fences`), where the memory, cpu, cpuacct, pids and freezer
  controllers are mounted and gpuq is root: a fence is a folder in each controller's
  hierarchy, `/sys/fs/cgroup/<controller>/gpuq/<name>`, and GPU devices are fenced too.
- none (`unfenced.NoFences`): `GPUQ_FENCES=off`, not root, or no hierarchy gpuq may write;
  it says why (`why_none`), and jobs run as they did before fences.

A fence is also how a job's processes are found (`members`) and stopped: a double fork or
a new session leaves the job's process group, never its cgroup. A plain kill of every
listed pid races the job's forks (a child born after the listing survives), so gpuq freezes
the fence first (v1's freezer, v2's `cgroup.freeze`: nothing in it runs, so nothing forks),
signals every process in it, thaws it, and for a kill repeats until it is empty; v2's
`cgroup.kill` does the same in the kernel, at once.
"""

from service.executors.fences.choice import open_fences
from service.executors.fences.shapes import FenceLimits, Fences, FenceUsage

__all__ = ["FenceLimits", "FenceUsage", "Fences", "open_fences"]
