"""Job fences on cgroup v2: `<root>/jobs/<name>` in the subtree delegated to gpuq.

v2 is one hierarchy: a fence is one folder. gpuq writes only where it was delegated a
cgroup: a companion unit's (deploy/gpuq-jobs.service, `GPUQ_FENCE_CGROUP`), or its own
(systemd's `Delegate=yes`; a container with its own cgroup namespace, mounted read-write).
The kernel lets no cgroup both hold processes and hand controllers to the cgroups below
it, so before enabling memory, cpu, cpuset and pids for the fences gpuq moves the
processes of that cgroup into a leaf of their own (`service`): the companion unit's `sleep`
into `holder`, or gpuq itself into `gpuq-service`:

    <root>/holder         the companion unit's process (gpuq stays in its own unit)
    <root>/gpuq-service   or, in gpuq's own cgroup, gpuq itself
    <root>/jobs/<name>    one job's fence

Settling is the same for every gpuq that starts: a root already emptied has nothing to move.

There is no device fence on v2 (that takes a BPF device program gpuq does not load):
`denied_gpus` is not enforced there, and the NVML watchdog stays the backstop.
"""

import contextlib
import functools
import os

from service.executors.fences.cgroup_files import (
    CPU_PERIOD_US,
    MIB,
    awaited,
    cpu_list,
    cpu_quota_us,
    keyed_number,
    limit_mb,
    pids_inside,
    read_setting,
    remove_folder,
    write_setting,
)
from service.executors.fences.shapes import FenceLimits, FenceUsage
from service.executors.fences.stopping import FREEZE_WAIT_S, kill_frozen, signal_frozen

#: the controllers a v2 fence uses, as `cgroup.subtree_control` names them
V2_CONTROLLERS = ("cpuset", "cpu", "memory", "pids")
#: those it cannot do without
V2_NEEDED = ("cpu", "memory", "pids")


class CgroupV2Fences:
    """Job fences below `root`, the cgroup v2 folder delegated to gpuq."""

    kind = "cgroup v2"
    why_none: str | None = None
    devices_fenced = False

    def __init__(self, root: str, parent: str = "jobs", service: str = "gpuq-service") -> None:
        self.root = root
        self.location: str | None = root
        self.parent = os.path.join(root, parent)
        self.service = os.path.join(root, service)
        self._settled = False

    def folder(self, name: str) -> str:
        return os.path.join(self.parent, name)

    def settle(self) -> None:
        """Readies the subtree: the root's processes out of it (where it is not the
        hierarchy's own root, which the kernel exempts), then the controllers enabled in
        the root and in the fences' parent. FileNotFoundError where the root is gone (its
        unit stopped): gpuq never makes the root itself."""
        offered = (read_setting(self.root, "cgroup.controllers") or "").split()
        wanted = " ".join(f"+{c}" for c in V2_CONTROLLERS if c in offered)
        with contextlib.suppress(FileExistsError):
            os.mkdir(self.parent)
        if os.path.exists(os.path.join(self.root, "cgroup.type")):  # not the very root
            self._move_out()
        if wanted:
            write_setting(self.root, "cgroup.subtree_control", wanted)
            write_setting(self.parent, "cgroup.subtree_control", wanted)
        self._settled = True

    def _move_out(self) -> None:
        """Moves every process of the root cgroup into its leaf beside the jobs'
        (`service`)."""
        pids = (read_setting(self.root, "cgroup.procs") or "").split()
        if not pids:
            return
        os.makedirs(self.service, exist_ok=True)
        procs = os.open(
            os.path.join(self.service, "cgroup.procs"), os.O_WRONLY | os.O_APPEND | os.O_CREAT
        )
        try:
            for pid in pids:  # the kernel takes one pid per write
                with contextlib.suppress(ProcessLookupError):
                    os.write(procs, f"{pid}\n".encode())
        finally:
            os.close(procs)

    def make(self, name: str, limits: FenceLimits) -> tuple[str, ...]:
        # Again where the parent went: systemd removes a stopped unit's empty cgroup.
        if not self._settled or not os.path.isdir(self.parent):
            self.settle()
        folder = self.folder(name)
        os.makedirs(folder, exist_ok=True)
        if limits.memory_mb is not None:
            write_setting(folder, "memory.max", str(limits.memory_mb * MIB))
            # No swap beside it; absent where the kernel does not account swap.
            with contextlib.suppress(FileNotFoundError, PermissionError):
                write_setting(folder, "memory.swap.max", "0")
        if limits.cpus is not None:
            write_setting(folder, "cpu.max", f"{cpu_quota_us(limits.cpus)} {CPU_PERIOD_US}")
        if limits.cpuset is not None:
            write_setting(folder, "cpuset.cpus", cpu_list(limits.cpuset))
        if limits.pids is not None:
            write_setting(folder, "pids.max", str(limits.pids))
        return (folder,)

    def members(self, name: str) -> list[int]:
        return sorted(pids_inside(self.folder(name)))

    def _freeze(self, name: str, frozen: bool) -> None:
        folder = self.folder(name)
        with contextlib.suppress(FileNotFoundError):
            write_setting(folder, "cgroup.freeze", "1" if frozen else "0")
            if frozen:
                awaited(functools.partial(_is_frozen, folder), FREEZE_WAIT_S)

    def signal(self, name: str, sig: int) -> None:
        members = functools.partial(pids_inside, self.folder(name))
        signal_frozen(members, functools.partial(self._freeze, name), sig)

    def kill(self, name: str) -> None:
        """cgroup.kill (Linux 5.14): the kernel kills the whole subtree at once, forks
        racing it included; where it is missing or something outlives it, the frozen
        rounds of v1."""
        folder = self.folder(name)
        members = functools.partial(pids_inside, folder)
        if members() and os.path.exists(os.path.join(folder, "cgroup.kill")):
            write_setting(folder, "cgroup.kill", "1")
            if awaited(lambda: not members(), 1.0):
                return
        kill_frozen(members, functools.partial(self._freeze, name), name)

    def usage(self, name: str) -> FenceUsage | None:
        folder = self.folder(name)
        if not os.path.isdir(folder):
            return None
        peak = read_setting(folder, "memory.peak")  # Linux 5.19
        used_us = keyed_number(read_setting(folder, "cpu.stat"), "usage_usec")
        return FenceUsage(
            memory_peak_mb=-(-int(peak) // MIB) if peak and peak.isdigit() else None,
            cpu_time_s=used_us / 1e6 if used_us is not None else None,
            oom_kills=keyed_number(read_setting(folder, "memory.events"), "oom_kill") or 0,
            memory_limit_mb=limit_mb(read_setting(folder, "memory.max")),
        )

    def remove(self, name: str) -> bool:
        return remove_folder(self.folder(name))

    def names(self) -> list[str]:
        if not os.path.isdir(self.parent):
            return []
        return sorted(e.name for e in os.scandir(self.parent) if e.is_dir(follow_symlinks=False))

    def close(self) -> None:
        pass  # a delegated cgroup, gpuq's own or its jobs' unit's: it stays for the next gpuq


def _is_frozen(folder: str) -> bool:
    """Whether the kernel has frozen every process of the v2 cgroup at `folder`."""
    return keyed_number(read_setting(folder, "cgroup.events"), "frozen") == 1
