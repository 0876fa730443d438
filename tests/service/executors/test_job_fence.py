"""How big a job's fence is, from its launch and the box; what its end says of it."""

from pathlib import Path

from gpuq.contract.device_plan import DevicePlan
from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus, Reason
from service.executors.base import Launch
from service.executors.fences import FenceUsage, open_fences
from service.executors.job_fence import FencePolicy, fence_parent, out_of_memory
from service.executors.prepare import thread_counts
from service.gpus.nvml import cores_in
from service.host import HostSize
from service.scheduler.starting import near_cores

BOX = HostSize(cpus=15.0, memory_mb=63 * 1024, total_cpus=16.0, total_memory_mb=64 * 1024)


def launch(gpus: tuple[int, ...], **got) -> Launch:
    devices = DevicePlan("sim", gpus) if gpus else DevicePlan.cpu()
    spec = JobSpec.model_validate({"kind": "command", "command": {"argv": ["true"]}})
    return Launch(1, 1, spec, devices, box_gpus=(0, 1, 2, 3), **got)


def test_a_job_gets_what_it_asked_for_and_none_of_the_other_gpus():
    policy = FencePolicy(open_fences("off"), BOX, pids_per_cpu=512)
    limits = policy.limits(launch((1, 2), cpus=2.5, host_memory_mb=8192))
    assert (limits.cpus, limits.memory_mb, limits.pids) == (2.5, 8192, 512 * 3)
    assert limits.denied_gpus == (0, 3)


def test_a_job_that_asked_for_nothing_is_held_to_the_box_less_the_reserve():
    policy = FencePolicy(open_fences("off"), BOX, pids_per_cpu=512)
    limits = policy.limits(launch(()))
    assert limits.cpus is None  # no quota
    assert limits.memory_mb == 63 * 1024  # never the OS's and gpuq's share
    assert limits.pids == 512 * 16
    assert limits.denied_gpus == (0, 1, 2, 3)  # a CPU job opens no GPU


def test_an_oom_kill_in_the_fence_is_the_jobs_host_oom_naming_its_limit_and_peak():
    verdict = out_of_memory(FenceUsage(2048, 10.0, oom_kills=1), asked_mb=2048)
    assert verdict is not None
    assert (verdict.status, verdict.reason) == (JobStatus.failed, Reason.host_oom)
    assert "host_memory_mb 2048" in verdict.message and "peaked at 2048 MiB" in verdict.message
    assert out_of_memory(FenceUsage(100, 1.0, oom_kills=0), asked_mb=2048) is None
    assert out_of_memory(None, asked_mb=None) is None


def test_two_gpuqs_on_one_box_keep_their_fences_apart(tmp_path: Path):
    assert fence_parent(tmp_path / "a") != fence_parent(tmp_path / "b")
    assert fence_parent(tmp_path / "a") == fence_parent(tmp_path / "a")


def test_threads_follow_the_cores_a_job_got():
    assert thread_counts(None) == {}
    assert thread_counts(0.5)["OMP_NUM_THREADS"] == "1"
    assert thread_counts(2.5) == {
        "OMP_NUM_THREADS": "3",
        "TF_NUM_INTRAOP_THREADS": "3",
        "TF_NUM_INTEROP_THREADS": "3",
    }


def test_a_job_runs_on_the_cores_nearest_its_gpus_where_the_box_has_more_than_one_node():
    box = frozenset(range(8))
    policy = FencePolicy(open_fences("off"), BOX, all_cores=box)
    assert policy.limits(launch((0,), cpus=2, near_cores=(0, 1, 2, 3))).cpuset == (0, 1, 2, 3)
    # one node (every core is near), too few near cores for its share, or none known: any
    assert policy.limits(launch((0,), cpus=2, near_cores=tuple(box))).cpuset is None
    assert policy.limits(launch((0,), cpus=6, near_cores=(0, 1, 2, 3))).cpuset is None
    assert policy.limits(launch((0,), cpus=2)).cpuset is None


def test_the_cores_near_a_set_of_gpus_are_near_any_of_them():
    near = {0: (0, 1), 1: (2, 3)}
    assert near_cores(near, (0, 1)) == (0, 1, 2, 3)
    assert near_cores(near, (0, 2)) == ()  # NVML said nothing of GPU 2
    assert near_cores(near, ()) == ()
    assert cores_in([0b1011, 0b1]) == (0, 1, 3, 64)


def test_after_a_restart_the_oom_message_names_the_limit_its_fence_held():
    used = FenceUsage(512, 3.0, oom_kills=2, memory_limit_mb=512)
    verdict = out_of_memory(used, asked_mb=None)
    assert verdict is not None and "host memory limit (512 MiB; it peaked at 512 MiB)" in (
        verdict.message
    )
