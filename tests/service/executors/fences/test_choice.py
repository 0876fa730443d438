"""Which fences a box gives gpuq, from its mounts and gpuq's own cgroup, and the fences of
a box that gives none."""

import os
import signal
from pathlib import Path

import pytest

from service.executors.fences import FenceLimits, open_fences
from service.executors.fences.choice import cgroup_mounts, delegated_root, v1_refusal
from service.executors.fences.unfenced import NoFences
from service.executors.fences.v1 import CgroupV1Fences

MOUNTS = """\
sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec,relatime 0 0
cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,nodev,noexec,relatime,cpu,cpuacct 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,nosuid,nodev,noexec,relatime,memory 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,xattr,name=systemd 0 0
"""


def test_mounts_name_each_controller_and_the_unified_hierarchy(tmp_path: Path) -> None:
    (tmp_path / "mounts").write_text(MOUNTS)
    found = cgroup_mounts(str(tmp_path / "mounts"))
    assert found.v2 == "/sys/fs/cgroup/unified"
    assert found.v1 == {
        "cpu": "/sys/fs/cgroup/cpu,cpuacct",
        "cpuacct": "/sys/fs/cgroup/cpu,cpuacct",
        "memory": "/sys/fs/cgroup/memory",
    }
    assert v1_refusal(found.v1) == (
        "cgroup v1 has no pids, freezer controller mounted: mount it under /sys/fs/cgroup, "
        "or on cgroup v2 run gpuq under systemd with Delegate=yes"
    )


def test_co_mounted_controllers_share_one_folder(tmp_path: Path) -> None:
    mounts = {c: str(tmp_path / c) for c in ("memory", "pids", "freezer")}
    mounts |= {"cpu": str(tmp_path / "cpu,cpuacct"), "cpuacct": str(tmp_path / "cpu,cpuacct")}
    fences = CgroupV1Fences(mounts, parent="gpuq")
    assert len(fences.folders("job-1-0")) == 4
    assert not fences.devices_fenced
    with pytest.raises(ValueError, match="freezer"):
        CgroupV1Fences({c: f for c, f in mounts.items() if c != "freezer"})


def test_a_delegated_v2_subtree_is_gpuqs_own_cgroup(tmp_path: Path) -> None:
    own = tmp_path / "cgroup"
    own.write_text("1:name=systemd:/\n0::/system.slice/gpuq.service\n")
    root = tmp_path / "cg2" / "system.slice" / "gpuq.service"
    root.mkdir(parents=True)
    (root / "cgroup.subtree_control").write_text("")
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    assert delegated_root(str(tmp_path / "cg2"), str(own)) == str(root)
    (root / "cgroup.controllers").write_text("cpu io pids\n")  # no memory: no fence
    assert delegated_root(str(tmp_path / "cg2"), str(own)) is None
    assert delegated_root(None, str(own)) is None


def test_this_box_fences_with_cgroup_v1() -> None:
    # The unified hierarchy here offers no controller: v1 it is, GPU devices included.
    fences = open_fences("auto")
    assert (fences.kind, fences.why_none, fences.devices_fenced) == ("cgroup v1", None, True)
    assert delegated_root(cgroup_mounts().v2) is None


def test_off_fences_nothing_and_says_why() -> None:
    off = open_fences("off")
    assert (off.kind, off.devices_fenced) == ("none", False)
    assert off.why_none == "GPUQ_FENCES=off: set GPUQ_FENCES=auto to fence jobs"
    with pytest.raises(ValueError, match="auto or off"):
        open_fences("on")


def test_not_root_fences_nothing_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    # What the kernel says to a user that is not root: no folder of the hierarchy is hers.
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    fences = open_fences("auto")
    assert (fences.kind, fences.devices_fenced) == ("none", False)
    assert fences.why_none == (
        "gpuq runs as uid 1000, not root: run it as root, or under systemd with Delegate=yes"
    )


def test_no_fences_are_harmless() -> None:
    none = NoFences("why")
    assert none.make("job-1-0", FenceLimits(memory_mb=16)) == ()
    assert none.members("job-1-0") == [] and none.names() == []
    none.signal("job-1-0", signal.SIGTERM)
    none.kill("job-1-0")
    assert none.usage("job-1-0") is None
    assert none.remove("job-1-0")
