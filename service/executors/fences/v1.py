"""Job fences on cgroup v1: one folder per controller, `<mount>/<parent>/<name>`.

v1 keeps each controller in a hierarchy of its own (`/sys/fs/cgroup/memory`, `.../cpu`...;
some distributions mount `cpu,cpuacct` together), so a fence is a folder in each, and a
process joins it by writing itself to every one. gpuq's folders sit under a parent of their
own (`gpuq`) at each hierarchy's top, beside whatever else the box runs.
"""

import contextlib
import functools
import os
from collections.abc import Mapping

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

#: what gpuq needs of v1; without any of them the box is not fenced by v1
V1_NEEDED = ("memory", "cpu", "cpuacct", "pids", "freezer")
#: what gpuq uses where mounted: cores pinned, GPU device nodes denied
V1_OPTIONAL = ("cpuset", "devices")
#: the character devices' major number of /dev/nvidia<minor>
NVIDIA_MAJOR = 195


class CgroupV1Fences:
    """Job fences in the v1 hierarchies `mounts` names (controller -> its mount folder)."""

    kind = "cgroup v1"
    why_none: str | None = None

    def __init__(self, mounts: Mapping[str, str], parent: str = "gpuq") -> None:
        missing = [c for c in V1_NEEDED if c not in mounts]
        if missing:
            raise ValueError(f"cgroup v1 without the {', '.join(missing)} controllers")
        used = [c for c in (*V1_NEEDED, *V1_OPTIONAL) if c in mounts]
        self.parent = parent
        #: controller -> the folder gpuq's fences sit in (one folder for co-mounted ones)
        self.parents = {c: os.path.join(os.path.realpath(mounts[c]), parent) for c in used}
        self.devices_fenced = "devices" in self.parents
        top = os.path.dirname(os.path.dirname(self.parents["memory"]))
        self.location: str | None = os.path.join(top, "<controller>", parent)

    def folder(self, controller: str, name: str) -> str:
        return os.path.join(self.parents[controller], name)

    def folders(self, name: str) -> tuple[str, ...]:
        """The fence's folders, one per hierarchy (co-mounted controllers share one)."""
        return tuple(dict.fromkeys(os.path.join(p, name) for p in self.parents.values()))

    def make(self, name: str, limits: FenceLimits) -> tuple[str, ...]:
        self._make_parents()
        remade = os.path.isdir(self.folder("memory", name))
        for folder in self.folders(name):
            os.makedirs(folder, exist_ok=True)
        if "cpuset" in self.parents:
            self._set_cores(name, limits.cpuset)
        # A new cgroup is unlimited: only a limit, or a fence made again, needs a write.
        if limits.memory_mb is not None or remade:
            self._set_memory(self.folder("memory", name), limits.memory_mb, remade)
        if limits.cpus is not None or remade:
            self._set_quota(self.folder("cpu", name), limits.cpus)
        if limits.pids is not None or remade:
            pids = str(limits.pids) if limits.pids is not None else "max"
            write_setting(self.folder("pids", name), "pids.max", pids)
        if "devices" in self.parents:
            for minor in limits.denied_gpus:  # exceptions to "allow all": the rest stays open
                rule = f"c {NVIDIA_MAJOR}:{minor} rwm"
                write_setting(self.folder("devices", name), "devices.deny", rule)
        return self.folders(name)

    def _make_parents(self) -> None:
        """gpuq's own folder in each hierarchy, its cpuset the whole box's (a new v1
        cpuset has no cores and no memory nodes, and no process may join it so)."""
        for controller, parent in self.parents.items():
            os.makedirs(parent, exist_ok=True)
            if controller == "cpuset" and not read_setting(parent, "cpuset.cpus"):
                _inherit_cpuset(parent)

    def _set_cores(self, name: str, cores: tuple[int, ...] | None) -> None:
        folder = self.folder("cpuset", name)
        _inherit_cpuset(folder)
        if cores is not None:
            write_setting(folder, "cpuset.cpus", cpu_list(cores))

    @staticmethod
    def _set_quota(folder: str, cpus: float | None) -> None:
        """`cpus` cores' worth of CPU time each period, on whichever cores (None: no
        quota)."""
        if cpus is None:
            write_setting(folder, "cpu.cfs_quota_us", "-1")
            return
        write_setting(folder, "cpu.cfs_period_us", str(CPU_PERIOD_US))
        write_setting(folder, "cpu.cfs_quota_us", str(cpu_quota_us(cpus)))

    @staticmethod
    def _set_memory(folder: str, memory_mb: int | None, remade: bool) -> None:
        """Host memory with no swap beside it: memory+swap (`memsw`, where the kernel
        accounts swap) held to the same figure. memsw may never be below the plain limit,
        so a fence made again is first let loose."""
        swap_too = os.path.exists(os.path.join(folder, "memory.memsw.limit_in_bytes"))
        if remade and swap_too:
            write_setting(folder, "memory.memsw.limit_in_bytes", "-1")
        limit = str(memory_mb * MIB) if memory_mb is not None else "-1"
        write_setting(folder, "memory.limit_in_bytes", limit)
        if swap_too:
            write_setting(folder, "memory.memsw.limit_in_bytes", limit)

    def members(self, name: str) -> list[int]:
        return sorted(self._members(name))

    def _members(self, name: str) -> set[int]:
        found: set[int] = set()
        for folder in self.folders(name):
            found |= pids_inside(folder)
        return found

    def _freeze(self, name: str, frozen: bool) -> None:
        folder = self.folder("freezer", name)
        state = "FROZEN" if frozen else "THAWED"
        with contextlib.suppress(FileNotFoundError):
            write_setting(folder, "freezer.state", state)
            if frozen:
                awaited(lambda: read_setting(folder, "freezer.state") == state, FREEZE_WAIT_S)

    def signal(self, name: str, sig: int) -> None:
        members = functools.partial(self._members, name)
        signal_frozen(members, functools.partial(self._freeze, name), sig)

    def kill(self, name: str) -> None:
        members = functools.partial(self._members, name)
        kill_frozen(members, functools.partial(self._freeze, name), name)

    def usage(self, name: str) -> FenceUsage | None:
        memory = self.folder("memory", name)
        if not os.path.isdir(memory):
            return None
        peak = read_setting(memory, "memory.max_usage_in_bytes")
        used_ns = read_setting(self.folder("cpuacct", name), "cpuacct.usage")
        oom = read_setting(memory, "memory.oom_control")
        return FenceUsage(
            memory_peak_mb=-(-int(peak) // MIB) if peak else None,
            cpu_time_s=int(used_ns) / 1e9 if used_ns else None,
            oom_kills=keyed_number(oom, "oom_kill") or 0,
            memory_limit_mb=limit_mb(read_setting(memory, "memory.limit_in_bytes")),
        )

    def remove(self, name: str) -> bool:
        return all([remove_folder(folder) for folder in self.folders(name)])

    def names(self) -> list[str]:
        parent = self.parents["memory"]
        if not os.path.isdir(parent):
            return []
        return sorted(e.name for e in os.scandir(parent) if e.is_dir(follow_symlinks=False))

    def close(self) -> None:
        if self.names():
            return  # jobs still run in it (or their fences wait to be removed)
        for parent in set(self.parents.values()):
            with contextlib.suppress(OSError):  # gone already, or a fence made meanwhile
                os.rmdir(parent)


def _inherit_cpuset(folder: str) -> None:
    """Gives a v1 cpuset the cores and memory nodes of the one above it."""
    above = os.path.dirname(folder)
    for setting in ("cpuset.cpus", "cpuset.mems"):
        write_setting(folder, setting, read_setting(above, setting) or "")
