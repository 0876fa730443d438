"""cgroup v1 fences on this machine's kernel: what it reports once a fence is made, and
real processes held by it."""

import errno
import os
import signal
import time
from pathlib import Path

from service.executors.fences.cgroup_files import MIB, read_setting
from service.executors.fences.choice import cgroup_mounts
from service.executors.fences.shapes import FenceLimits
from service.executors.fences.v1 import CgroupV1Fences
from tests.service.executors.fences.conftest import (
    ESCAPE,
    HEARS_USR1,
    inside,
    job_name,
    parent_for_tests,
    said,
)


def test_the_kernel_reports_each_limit(v1: CgroupV1Fences) -> None:
    name = job_name()
    limits = FenceLimits(cpus=1.5, cpuset=(1,), memory_mb=64, pids=16, denied_gpus=(1,))
    folders = v1.make(name, limits)
    assert sorted(folders) == sorted(f"{p}/{name}" for p in set(v1.parents.values()))
    assert all(os.path.isdir(f) for f in folders)
    assert read_setting(v1.folder("memory", name), "memory.limit_in_bytes") == str(64 * MIB)
    memsw = read_setting(v1.folder("memory", name), "memory.memsw.limit_in_bytes")
    assert memsw == str(64 * MIB)
    assert read_setting(v1.folder("cpu", name), "cpu.cfs_quota_us") == "150000"
    assert read_setting(v1.folder("cpu", name), "cpu.cfs_period_us") == "100000"
    assert read_setting(v1.folder("cpuset", name), "cpuset.cpus") == "1"
    assert read_setting(v1.folder("cpuset", name), "cpuset.mems") == read_setting(
        "/sys/fs/cgroup/cpuset", "cpuset.mems"
    )
    assert read_setting(v1.folder("pids", name), "pids.max") == "16"
    # Made again, looser: memsw is let loose first, so the kernel takes the higher limit.
    v1.make(name, FenceLimits(memory_mb=128))
    assert read_setting(v1.folder("memory", name), "memory.limit_in_bytes") == str(128 * MIB)
    assert read_setting(v1.folder("cpu", name), "cpu.cfs_quota_us") == "-1"
    assert read_setting(v1.folder("pids", name), "pids.max") == "max"


def test_over_its_memory_a_job_meets_the_oom_killer(v1: CgroupV1Fences) -> None:
    name = job_name()
    child = inside(v1.make(name, FenceLimits(memory_mb=64)), "held = b'x' * (200 << 20)")
    assert child.wait(timeout=10) == -signal.SIGKILL
    usage = v1.usage(name)
    assert usage is not None
    assert usage.oom_kills >= 1
    assert usage.memory_peak_mb is not None and 48 <= usage.memory_peak_mb <= 64
    assert usage.memory_limit_mb == 64


def test_one_core_holds_two_busy_processes_to_one_core(v1: CgroupV1Fences) -> None:
    name = job_name()
    busy = "os.fork()\nend = time.monotonic() + 1.5\nwhile time.monotonic() < end:\n    pass\n"
    started = time.monotonic()
    child = inside(v1.make(name, FenceLimits(cpus=1)), busy)
    assert child.wait(timeout=10) == 0
    wall_s = time.monotonic() - started
    usage = v1.usage(name)
    assert usage is not None and usage.cpu_time_s is not None
    # Unfenced, two busy processes on this 2-core box take up to twice the wall time.
    assert usage.cpu_time_s <= 1.2 * wall_s


def test_the_process_past_pids_max_is_refused(v1: CgroupV1Fences) -> None:
    name = job_name()
    forks = (
        "made = 0\n"
        "while True:\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30)\n"
        "            os._exit(0)\n"
        "    except OSError as exc:\n"
        "        print(json.dumps({'made': made, 'errno': exc.errno}), flush=True)\n"
        "        break\n"
        "    made += 1\n"
        "time.sleep(30)\n"
    )
    child = inside(v1.make(name, FenceLimits(pids=16)), forks)
    try:
        assert said(child) == {"made": 15, "errno": errno.EAGAIN}  # itself and 15 more
        assert len(v1.members(name)) == 16
    finally:
        v1.kill(name)
        child.wait(timeout=5)
    assert v1.members(name) == []


def test_a_gpu_that_is_not_its_own_cannot_be_opened(v1: CgroupV1Fences, tmp_path: Path) -> None:
    for minor in (0, 1):
        os.mknod(tmp_path / f"nvidia{minor}", 0o666 | 0o020000, os.makedev(195, minor))
    opens = (
        "seen = {}\n"
        f"for minor in (0, 1):\n"
        "    try:\n"
        f"        os.close(os.open('{tmp_path}/nvidia%d' % minor, os.O_RDWR))\n"
        "        seen[minor] = 'opened'\n"
        "    except OSError as exc:\n"
        "        seen[minor] = errno.errorcode[exc.errno]\n"
        "print(json.dumps(seen), flush=True)\n"
    )
    assert v1.devices_fenced
    child = inside(v1.make(job_name(), FenceLimits(denied_gpus=(1,))), opens)
    seen = said(child)
    child.wait(timeout=5)
    assert seen["1"] == "EPERM"  # another job's GPU: the fence says no
    assert seen["0"] != "EPERM"  # its own: no driver here (ENXIO), but the fence lets it try


def test_a_double_fork_in_a_new_session_stays_inside_until_killed(v1: CgroupV1Fences) -> None:
    name = job_name()
    child = inside(v1.make(name, FenceLimits()), ESCAPE)
    said(child)
    members = v1.members(name)
    assert child.pid in members and len(members) == 2  # the job and its escaped grandchild
    (escaped,) = set(members) - {child.pid}
    assert os.getsid(escaped) != os.getsid(child.pid)
    assert not v1.remove(name)  # not while they live
    v1.kill(name)
    assert v1.members(name) == []
    assert child.wait(timeout=5) == -signal.SIGKILL
    assert not _alive(escaped)
    assert v1.remove(name)
    assert v1.usage(name) is None


def test_a_signal_reaches_the_job_through_a_freeze_and_a_thaw(v1: CgroupV1Fences) -> None:
    name = job_name()
    child = inside(v1.make(name, FenceLimits()), HEARS_USR1)
    said(child)
    v1.signal(name, signal.SIGUSR1)
    assert said(child) == {"usr1": 1}
    assert read_setting(v1.folder("freezer", name), "freezer.state") == "THAWED"
    assert child.wait(timeout=5) == 0


def test_fences_are_found_again_by_a_fresh_gpuq(v1: CgroupV1Fences) -> None:
    names = sorted([job_name(), job_name()])
    for name in names:
        v1.make(name, FenceLimits(memory_mb=32))
    again = CgroupV1Fences(cgroup_mounts().v1, parent=parent_for_tests())
    assert again.names() == names


def test_a_fence_that_is_not_there_is_left_alone(v1: CgroupV1Fences) -> None:
    name = job_name()
    assert v1.members(name) == []
    assert v1.usage(name) is None
    v1.signal(name, signal.SIGTERM)
    v1.kill(name)
    assert v1.remove(name)


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie nobody reaps is not running)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
