"""cgroup v2 fences: the files written, in a folder made to look like a delegated subtree,
and processes placed, moved, listed, frozen and killed on this machine's real
(controller-less) v2 hierarchy."""

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from service.executors.fences.cgroup_files import MIB, pids_inside, read_setting, remove_folder
from service.executors.fences.choice import HOLDER
from service.executors.fences.shapes import FenceLimits
from service.executors.fences.v2 import CgroupV2Fences
from tests.service.executors.fences.conftest import (
    ESCAPE,
    HEARS_USR1,
    UNIFIED,
    delegated,
    inside,
    job_name,
    parent_for_tests,
    said,
)


def test_a_fence_writes_each_limit(tmp_path: Path) -> None:
    root = delegated(tmp_path / "gpuq.service", nested=True)
    fences = CgroupV2Fences(str(root))
    limits = FenceLimits(cpus=1.5, cpuset=(2, 0), memory_mb=64, pids=32, denied_gpus=(1,))
    (folder,) = fences.make("job-7-0", limits)
    assert folder == f"{root}/jobs/job-7-0"
    assert read_setting(folder, "memory.max") == str(64 * MIB)
    assert read_setting(folder, "memory.swap.max") == "0"
    assert read_setting(folder, "cpu.max") == "150000 100000"
    assert read_setting(folder, "cpuset.cpus") == "0,2"
    assert read_setting(folder, "pids.max") == "32"
    assert not fences.devices_fenced
    assert not os.path.exists(f"{folder}/devices.deny")
    # gpuq out of its root first (no process may sit beside enabled controllers)...
    assert read_setting(str(root), "gpuq-service/cgroup.procs") == "111\n222"
    # ...then the controllers handed down to the jobs' parent and from it to each fence.
    enabled = "+cpuset +cpu +memory +pids"
    assert read_setting(str(root), "cgroup.subtree_control") == enabled
    assert read_setting(str(root), "jobs/cgroup.subtree_control") == enabled
    assert fences.names() == ["job-7-0"]


def test_no_limit_no_write_and_the_very_root_keeps_its_processes(tmp_path: Path) -> None:
    root = delegated(tmp_path / "root", nested=False)
    (folder,) = CgroupV2Fences(str(root)).make("job-8-0", FenceLimits())
    assert os.listdir(folder) == []
    assert not (root / "gpuq-service").exists()
    assert read_setting(str(root), "cgroup.subtree_control") == "+cpuset +cpu +memory +pids"


def test_usage_is_read_from_the_kernels_counters(tmp_path: Path) -> None:
    fences = CgroupV2Fences(str(delegated(tmp_path / "root", nested=False)))
    (folder,) = fences.make("job-9-0", FenceLimits())
    Path(folder, "memory.peak").write_text(f"{64 * MIB + 1}\n")
    Path(folder, "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\n")
    Path(folder, "memory.events").write_text("low 0\nhigh 0\nmax 9\noom 2\noom_kill 1\n")
    Path(folder, "memory.max").write_text("max\n")
    usage = fences.usage("job-9-0")
    assert usage is not None
    assert (usage.memory_peak_mb, usage.cpu_time_s, usage.oom_kills) == (65, 2.5, 1)
    assert usage.memory_limit_mb is None  # `max`: no limit
    Path(folder, "memory.max").write_text(f"{512 * MIB}\n")
    assert (fences.usage("job-9-0") or usage).memory_limit_mb == 512
    assert fences.usage("job-10-0") is None


def test_a_process_joins_is_listed_and_killed_with_its_escapees(v2: CgroupV2Fences) -> None:
    name = job_name()
    (folder,) = v2.make(name, FenceLimits())
    child = inside((folder,), ESCAPE)
    said(child)
    members = v2.members(name)
    assert child.pid in members and len(members) == 2  # the escaped grandchild too
    assert (
        f"0::/{Path(folder).relative_to(v2.root)}" in Path(f"/proc/{child.pid}/cgroup").read_text()
    )
    assert not v2.remove(name)
    v2.kill(name)
    assert v2.members(name) == []
    assert child.wait(timeout=5) == -signal.SIGKILL
    assert v2.remove(name)
    assert v2.names() == []


def test_a_signal_is_sent_frozen_and_the_fence_thawed(v2: CgroupV2Fences) -> None:
    name = job_name()
    child = inside(v2.make(name, FenceLimits()), HEARS_USR1)
    said(child)
    v2.signal(name, signal.SIGUSR1)
    assert said(child) == {"usr1": 1}
    assert child.wait(timeout=5) == 0
    assert "frozen 0" in (read_setting(v2.folder(name), "cgroup.events") or "")


def test_a_fence_after_its_parent_went_settles_again_and_never_makes_the_root(
    tmp_path: Path,
) -> None:
    root = delegated(tmp_path / "gpuq-jobs.service", nested=True)
    fences = CgroupV2Fences(str(root), service=HOLDER)
    fences.make("job-1-0", FenceLimits())
    # gpuq-jobs.service restarted with no job running: systemd removed its emptied cgroup
    # and made a fresh one, its controllers off.
    shutil.rmtree(root / "jobs")
    (root / "cgroup.subtree_control").write_text("")
    fences.make("job-2-0", FenceLimits())
    enabled = "+cpuset +cpu +memory +pids"
    assert read_setting(str(root), "cgroup.subtree_control") == enabled
    assert read_setting(str(root), "jobs/cgroup.subtree_control") == enabled
    # Stopped and gone: the kernel's refusal, never a cgroup of gpuq's making in its place.
    shutil.rmtree(root)
    with pytest.raises(FileNotFoundError):
        fences.make("job-3-0", FenceLimits())
    assert not root.exists()


def test_a_companion_cgroups_process_moves_into_holder_and_gpuq_stays() -> None:
    """gpuq-jobs.service's cgroup, on the real v2 hierarchy: its `sleep` moves into `holder`
    at the first fence while gpuq (this process) stays where it is, and the next gpuq
    finds nothing left to move."""
    assert os.geteuid() == 0, "the fence tests need root"
    root = Path(UNIFIED, f"{parent_for_tests()}-jobs")
    root.mkdir()
    own = Path("/proc/self/cgroup").read_text()
    sleep = subprocess.Popen(["sleep", "60"])
    try:
        (root / "cgroup.procs").write_text(str(sleep.pid))
        first = CgroupV2Fences(str(root), service=HOLDER)
        first.make(job_name(), FenceLimits())
        assert pids_inside(str(root / HOLDER)) == {sleep.pid}
        assert f"0::/{root.name}/{HOLDER}\n" in Path(f"/proc/{sleep.pid}/cgroup").read_text()
        assert read_setting(str(root), "cgroup.procs") == ""
        assert Path("/proc/self/cgroup").read_text() == own
        again = CgroupV2Fences(str(root), service=HOLDER)  # a restarted gpuq
        again.make(job_name(), FenceLimits())
        assert pids_inside(str(root / HOLDER)) == {sleep.pid}
        assert len(again.names()) == 2
        assert Path("/proc/self/cgroup").read_text() == own
    finally:
        sleep.kill()
        sleep.wait()
        assert remove_folder(str(root))
