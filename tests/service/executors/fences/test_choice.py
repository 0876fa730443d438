"""Which fences a box gives gpuq, from its mounts and gpuq's own cgroup, and the fences of
a box that gives none."""

import os
import signal
from pathlib import Path

import pytest

from service.executors.fences import FenceLimits, choice, open_fences
from service.executors.fences.cgroup_files import read_setting
from service.executors.fences.choice import (
    HOLDER,
    CgroupMounts,
    cgroup_mounts,
    delegated_root,
    v1_refusal,
)
from service.executors.fences.unfenced import NoFences
from service.executors.fences.v1 import CgroupV1Fences
from tests.service.executors.fences.conftest import delegated

#: where deploy/gpuq.service points GPUQ_FENCE_CGROUP
JOBS_CGROUP = "system.slice/gpuq-jobs.service"

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
    # The unified hierarchy here offers no controller: v1 it is, GPU devices included, and
    # GPUQ_FENCE_CGROUP (which gpuq.service sets on every host) does not apply.
    for fence_cgroup in (None, f"/sys/fs/cgroup/{JOBS_CGROUP}"):
        fences = open_fences("auto", "gpuq-x", fence_cgroup)
        assert (fences.kind, fences.why_none, fences.devices_fenced) == ("cgroup v1", None, True)
        assert fences.location == "/sys/fs/cgroup/<controller>/gpuq-x"
    assert delegated_root(cgroup_mounts().v2) is None


@pytest.fixture
def v2_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The top of a cgroup v2 host's hierarchy, which holds the controllers, as
    `open_fences` finds it mounted; this process's own cgroup is its top (`0::/`)."""
    top = delegated(tmp_path / "cg2", nested=False)
    monkeypatch.setattr(choice, "cgroup_mounts", lambda: CgroupMounts(v2=str(top)))
    return top


def test_on_v2_jobs_are_fenced_in_the_fence_cgroup_its_processes_in_holder(
    v2_host: Path,
) -> None:
    jobs = delegated(v2_host / JOBS_CGROUP, nested=True)
    fences = open_fences("auto", v2_root=str(jobs))
    assert (fences.kind, fences.location) == ("cgroup v2", str(jobs))
    (folder,) = fences.make("job-1-0", FenceLimits(memory_mb=64))
    assert folder == f"{jobs}/jobs/job-1-0"
    assert read_setting(str(jobs), f"{HOLDER}/cgroup.procs") == "111\n222"
    assert not (jobs / "gpuq-service").exists()
    assert read_setting(str(jobs), "cgroup.subtree_control") == "+cpuset +cpu +memory +pids"
    # Unset or empty (a container's gpuq): gpuq's own delegated cgroup, as before.
    for unset in (None, ""):
        own = open_fences("auto", v2_root=unset)
        assert (own.kind, own.location) == ("cgroup v2", str(v2_host))


def test_on_v2_a_fence_cgroup_missing_or_not_delegated_fences_nothing_and_says_why(
    v2_host: Path,
) -> None:
    jobs = v2_host / JOBS_CGROUP
    missing = open_fences("auto", v2_root=str(jobs))
    assert (missing.kind, missing.location) == ("none", None)
    fix = (
        "start gpuq-jobs.service (deploy/gpuq-jobs.service), set GPUQ_FENCE_CGROUP to the "
        "cgroup delegated to gpuq's jobs, or set it empty to fence them in gpuq's own"
    )
    assert missing.why_none == f"GPUQ_FENCE_CGROUP names {jobs}, which does not exist: {fix}"
    # A unit without Delegate=yes: systemd hands it no cpu or pids controller.
    jobs.mkdir(parents=True)
    (jobs / "cgroup.subtree_control").write_text("")
    (jobs / "cgroup.controllers").write_text("memory\n")
    assert open_fences("auto", v2_root=str(jobs)).why_none == (
        f"GPUQ_FENCE_CGROUP names {jobs}, which is not delegated to gpuq (writable, offering "
        f"cpu, memory, pids): {fix}"
    )


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
