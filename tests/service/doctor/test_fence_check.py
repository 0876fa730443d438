"""`gpuq doctor` on job fences: which the box has, and why not where it has none."""

from service.doctor.fence_check import fence_check
from service.doctor.report import Status
from service.executors.fences import open_fences
from service.executors.fences.v2 import CgroupV2Fences


def test_this_machines_cgroup_v1_fences_jobs_and_their_gpu_devices():
    check = fence_check(open_fences("auto", "gpuq-doctor-test"))
    assert check.status == Status.passed
    assert check.detail.startswith(
        "cgroup v1 in /sys/fs/cgroup/<controller>/gpuq-doctor-test: each job held to its cores"
    )
    assert "kept off the GPUs it was not given" in check.detail


def test_on_cgroup_v2_it_says_the_nvml_watchdog_is_the_device_backstop(tmp_path):
    check = fence_check(CgroupV2Fences(str(tmp_path)))
    assert check.status == Status.passed
    assert check.detail.startswith(f"cgroup v2 in {tmp_path}: each job held")
    assert "GPU devices not fenced" in check.detail and "NVML watchdog" in check.detail


def test_with_no_fences_it_says_why_and_how_to_get_them():
    check = fence_check(open_fences("off"))
    assert check.status == Status.skipped
    assert "GPUQ_FENCES=off" in check.detail and "jobs run unfenced" in check.detail
    assert "Delegate=yes" in check.hint
