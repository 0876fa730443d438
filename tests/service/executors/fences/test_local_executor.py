"""The local executor's fences on this machine's cgroup v1: one no job holds is ended and
removed at the next look, and a gpuq that stops with none left leaves nothing behind."""

import os
from pathlib import Path

from service.executors import LocalExecutor
from service.executors.fences import FenceLimits
from service.executors.fences.v1 import CgroupV1Fences
from service.executors.job_fence import FencePolicy
from service.host import HostSize
from tests.processes import gone
from tests.service.executors.fences.conftest import ESCAPE, inside, job_name, said

BOX = HostSize(cpus=2.0, memory_mb=4096, total_cpus=2.0, total_memory_mb=5120)


def test_a_fence_no_job_holds_is_ended_and_removed_and_the_parent_goes_on_close(
    v1: CgroupV1Fences, tmp_path: Path
):
    # What a start leaves that gpuq stopped before recording: a runner that escaped, in a
    # fence of its own, whose job was queued again.
    name = job_name()
    child = inside(v1.make(name, FenceLimits(memory_mb=256)), ESCAPE)
    assert said(child) == {"ready": 1}
    stray = set(v1.members(name))
    assert len(stray) == 2  # the program and its escapee in a session of its own
    executor = LocalExecutor(tmp_path / "runs", fence=FencePolicy(v1, BOX))
    assert executor.exited() == []
    assert all(gone(pid) for pid in stray if pid != child.pid)
    child.wait(timeout=5)
    assert v1.names() == []
    executor.close()
    assert not any(os.path.exists(p) for p in v1.parents.values())
