"""Which fences this box gives gpuq (`open_fences`), from the kernel's own word: the
cgroup file systems mounted (`/proc/self/mounts`) and gpuq's cgroup (`/proc/self/cgroup`),
or on cgroup v2 the cgroup `GPUQ_FENCE_CGROUP` names (deploy/gpuq-jobs.service's, so that
gpuq's own holds no job and systemd can restart gpuq while jobs run). Nothing is written
here; the first fence made writes."""

import os
from dataclasses import dataclass, field

from service.executors.fences.cgroup_files import read_setting
from service.executors.fences.shapes import Fences
from service.executors.fences.unfenced import NoFences
from service.executors.fences.v1 import V1_NEEDED, V1_OPTIONAL, CgroupV1Fences
from service.executors.fences.v2 import V2_NEEDED, CgroupV2Fences

MOUNTS = "/proc/self/mounts"
OWN_CGROUP = "/proc/self/cgroup"
DELEGATE = "under systemd with Delegate=yes"
#: the leaf a companion cgroup's own processes move into, beside the jobs' fences
HOLDER = "holder"


@dataclass
class CgroupMounts:
    """The cgroup hierarchies mounted here: v1's by controller, v2's one folder."""

    v1: dict[str, str] = field(default_factory=dict)
    v2: str | None = None


def cgroup_mounts(table: str = MOUNTS) -> CgroupMounts:
    """The v1 controllers gpuq uses and the v2 hierarchy, as `table` lists their mounts
    (co-mounted v1 controllers, `cpu,cpuacct`, share a folder)."""
    found = CgroupMounts()
    with open(table) as mounts:
        for line in mounts:
            _, folder, kind, options, *_ = line.split()
            if kind == "cgroup2" and found.v2 is None:
                found.v2 = folder
            elif kind == "cgroup":
                for controller in options.split(","):
                    if controller in (*V1_NEEDED, *V1_OPTIONAL):
                        found.v1.setdefault(controller, folder)
    return found


def delegated_root(v2: str | None, own: str = OWN_CGROUP) -> str | None:
    """gpuq's own v2 cgroup folder where it is delegated to gpuq (`is_delegated`)."""
    if v2 is None:
        return None
    with open(own) as cgroups:
        path = next((line[3:].strip() for line in cgroups if line.startswith("0::")), None)
    if path is None or path.endswith(" (deleted)"):
        return None
    root = os.path.normpath(os.path.join(v2, path.lstrip("/")))
    return root if is_delegated(root) else None


def is_delegated(root: str) -> bool:
    """Whether gpuq may fence jobs in the v2 cgroup folder `root`: it may write its
    `cgroup.subtree_control` and make folders in it, and it offers what a fence needs."""
    writable = os.access(root, os.W_OK) and os.access(
        os.path.join(root, "cgroup.subtree_control"), os.W_OK
    )
    return writable and offers_v2_needs(root)


def offers_v2_needs(folder: str) -> bool:
    """Whether the v2 cgroup at `folder` offers every controller a fence needs; at the
    hierarchy's top, whether v2 holds them at all (a v1 host's v2 hierarchy is empty)."""
    offered = (read_setting(folder, "cgroup.controllers") or "").split()
    return all(c in offered for c in V2_NEEDED)


def companion_fences(folder: str) -> Fences:
    """The fences in `folder` (`GPUQ_FENCE_CGROUP`), a cgroup delegated to gpuq's jobs
    apart from gpuq's own: its own processes (the companion unit's `sleep`) move into
    `HOLDER` beside the jobs, and gpuq stays where it is. None, saying why and what would
    do, where it is missing or not delegated."""
    if is_delegated(folder):
        return CgroupV2Fences(folder, service=HOLDER)
    if os.path.isdir(folder):
        problem = f"is not delegated to gpuq (writable, offering {', '.join(V2_NEEDED)})"
    else:
        problem = "does not exist"
    return NoFences(
        f"GPUQ_FENCE_CGROUP names {folder}, which {problem}: start gpuq-jobs.service "
        "(deploy/gpuq-jobs.service), set GPUQ_FENCE_CGROUP to the cgroup delegated to "
        "gpuq's jobs, or set it empty to fence them in gpuq's own"
    )


def v1_refusal(v1: dict[str, str]) -> str | None:
    """Why v1 cannot fence jobs here, with the fix; None where it can."""
    missing = [c for c in V1_NEEDED if c not in v1]
    if missing:
        return (
            f"cgroup v1 has no {', '.join(missing)} controller mounted: mount it under "
            f"/sys/fs/cgroup, or on cgroup v2 run gpuq {DELEGATE}"
        )
    if not all(os.access(v1[c], os.W_OK) for c in V1_NEEDED):
        if os.geteuid() != 0:
            return f"gpuq runs as uid {os.geteuid()}, not root: run it as root, or {DELEGATE}"
        return "the cgroup v1 hierarchies are read-only here: mount /sys/fs/cgroup read-write"
    return None


def open_fences(mode: str = "auto", parent: str = "gpuq", v2_root: str | None = None) -> Fences:
    """The fences gpuq puts each job in (`GPUQ_FENCES`): "off", none; "auto", cgroup v2
    where gpuq has a delegated subtree (`v2_root`, `GPUQ_FENCE_CGROUP`, where set and v2
    holds the controllers; else gpuq's own cgroup), else the v1 controllers where they are
    mounted and gpuq may write them, else none, saying why. On v1 the fences are in
    `parent` in each controller's hierarchy, one per gpuq on the box (`fence_parent`)."""
    if mode == "off":
        return NoFences("GPUQ_FENCES=off: set GPUQ_FENCES=auto to fence jobs")
    if mode != "auto":
        raise ValueError(f"GPUQ_FENCES is auto or off, not {mode!r}")
    mounts = cgroup_mounts()
    if v2_root and mounts.v2 is not None and offers_v2_needs(mounts.v2):
        return companion_fences(v2_root)
    root = delegated_root(mounts.v2)
    if root is not None:
        return CgroupV2Fences(root)
    why_not_v1 = v1_refusal(mounts.v1)
    if why_not_v1 is None:
        return CgroupV1Fences(mounts.v1, parent)
    if mounts.v1:
        return NoFences(why_not_v1)
    if mounts.v2 is not None:
        return NoFences(f"cgroup v2 without a delegated subtree: run gpuq {DELEGATE}")
    return NoFences("no cgroup file system is mounted: mount cgroup2 at /sys/fs/cgroup")
