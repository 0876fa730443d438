"""cgroup v2 fences: the files written, in a folder made to look like a delegated subtree,
and processes placed, listed, frozen and killed on this machine's real (controller-less)
v2 hierarchy."""

import os
import signal
from pathlib import Path

from service.executors.fences.cgroup_files import MIB, read_setting
from service.executors.fences.shapes import FenceLimits
from service.executors.fences.v2 import CgroupV2Fences
from tests.service.executors.fences.conftest import ESCAPE, HEARS_USR1, inside, job_name, said


def delegated(root: Path, *, nested: bool) -> Path:
    """A folder with a delegated cgroup's files: `nested`, it is not a hierarchy's root
    (it has `cgroup.type`) and holds gpuq's processes."""
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids\n")
    (root / "cgroup.subtree_control").write_text("")
    (root / "cgroup.procs").write_text("111\n222\n" if nested else "")
    if nested:
        (root / "cgroup.type").write_text("domain\n")
    return root


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
