"""`gpuq doctor`: the simulated path for real (TensorFlow in a child), the NVML checks and
the judging of GPU probes with the NVML stand-in (no GPU here)."""

import json
import os
import pwd
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuq.contract.device_plan import DevicePlan
from gpuq.contract.rundir import RunDir, read_json
from gpuq.contract.runspec import RunSpec
from gpuq.contract.spec import JobSpec
from service.cli.app import main
from service.doctor.frameworks import Framework, framework_checks
from service.doctor.gpu_probes import (
    PROBE_CAP_MB,
    Probe,
    judge_held,
    judge_over,
    judge_released,
    probe,
)
from service.doctor.processes import facts
from service.executors.launcher import Launcher
from service.gpus import inventory as inventory_module
from tests.fakes import FakeNvml


def doctor_json(capsys) -> tuple[int, dict]:
    code = main(["doctor", "--json"])
    return code, json.loads(capsys.readouterr().out)


def by_name(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"]}


def test_on_simulated_gpus_it_says_so_and_trains_over_them(monkeypatch, capsys):
    monkeypatch.setenv("GPUQ_GPUS", "sim:3x8GiB")
    code, report = doctor_json(capsys)
    assert code == 0 and report["ok"] and report["simulated"]
    checks = by_name(report)
    assert checks["GPUs"]["detail"] == (
        "3 simulated GPUs of 8192 MiB (GPUQ_GPUS=sim:3x8GiB): jobs train on CPU devices"
    )
    assert checks["simulated GPUs"] == {
        "name": "simulated GPUs",
        "status": "pass",
        "detail": "MirroredStrategy ran 3 replicas and an all-reduce on the CPU",
        "hint": "",
    }
    tensorflow = next(f for f in report["frameworks"] if f["name"] == "tensorflow")
    assert tensorflow["installed"] and tensorflow["version"].startswith("2.")
    assert report["gpus"] == [] and report["driver"] is None


def test_a_bad_gpus_setting_is_one_failed_check(monkeypatch, capsys):
    monkeypatch.setenv("GPUQ_GPUS", "sim:lots")
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "✗  GPUs" in out and "GPUQ_GPUS='sim:lots' is not understood" in out
    assert out.rstrip().endswith("1 check failed")


def execed(proc: subprocess.Popen) -> subprocess.Popen:
    """`proc` once its command line is its own: read before the child has exec'd, it is
    empty (or the parent's), and the doctor would call the process foreign and nameless."""
    deadline = time.monotonic() + 30
    while b"/x/runs/" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline, f"pid {proc.pid} never ran its program"
        time.sleep(0.01)
    return proc


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen]:
    """A process gpuq did not start, as if someone trained by hand; its arguments name a
    runner and a run directory, which makes it no runner."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "worker.runner", "/x/runs/8/1"],
        start_new_session=True,
    )
    yield execed(proc)
    proc.kill()
    proc.wait()


@pytest.fixture
def gpuq_job(tmp_path) -> Iterator[subprocess.Popen]:
    """A process in the group of a gpuq runner of job 7: a runner's command line
    (`python -P -m worker.runner RUN_DIR`), run by a stand-in module that only sleeps."""
    (tmp_path / "worker").mkdir()
    (tmp_path / "worker" / "__init__.py").write_text("")
    (tmp_path / "worker" / "runner.py").write_text("import time\ntime.sleep(60)\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "worker.runner", "/x/runs/7/1"],
        cwd=tmp_path,  # sys.path[0]: the stand-in, not gpuq's runner
        start_new_session=True,
    )
    yield execed(proc)
    proc.kill()
    proc.wait()


def test_on_nvml_it_lists_the_driver_gpus_and_whose_processes(
    monkeypatch, capsys, stranger, gpuq_job
):
    fake = FakeNvml(count=3, memory_mb=24564, compute_modes={1: "Exclusive_Process"}, mig={2: True})
    fake.put(0, stranger.pid, 2048)
    fake.put(0, gpuq_job.pid, 1000)
    monkeypatch.setattr(inventory_module, "NvmlProbe", lambda: fake)
    monkeypatch.setenv("GPUQ_GPUS", "nvml")
    code, report = doctor_json(capsys)

    assert code == 1 and not report["ok"] and not report["simulated"]
    assert report["driver"] == {"driver_version": "580.159.04", "cuda_version": "13.0"}
    checks = by_name(report)
    assert checks["NVML"]["detail"] == "driver 580.159.04, CUDA 13.0, 3 GPUs"
    assert checks["GPU 0"] == {
        "name": "GPU 0",
        "status": "pass",
        "detail": "Fake GPU, GPU-fake-0, 24564 MiB, compute mode Default, no MIG",
        "hint": "",
    }
    assert checks["GPU 1"]["status"] == "fail"
    assert checks["GPU 1"]["hint"] == (
        "jobs that share a GPU need the Default compute mode: nvidia-smi -i 1 -c DEFAULT"
    )
    assert checks["GPU 2"]["status"] == "fail"
    assert checks["GPU 2"]["hint"].endswith("nvidia-smi -i 2 -mig 0")

    me = pwd.getpwuid(os.getuid()).pw_name
    python = sys.executable
    assert checks["GPU 0 processes"]["detail"] == (
        f"pid {stranger.pid} (foreign, {me}: {python} -c import time; time.sleep(60) "
        f"worker.runner /x/runs/8/1): 2048 MiB; pid {gpuq_job.pid} (gpuq job 7, {me}: "
        f"{python} -m worker.runner /x/runs/7/1): 1000 MiB"
    )
    assert checks["GPU 1 processes"]["detail"] == "none"
    listed = report["gpus"][0]["processes"]
    assert [(p["pid"], p["user"], p["job_id"], p["foreign"]) for p in listed] == [
        (stranger.pid, me, None, True),
        (gpuq_job.pid, me, 7, False),
    ]

    # This machine's TensorFlow is a CPU build: it fails on real GPUs, and with no
    # framework that sees them nothing can be probed.
    assert checks["TensorFlow"]["status"] == "fail"
    assert checks["TensorFlow"]["detail"].endswith(", a CPU build, sees no GPU")
    assert checks["TensorFlow"]["hint"] == (
        "install gpuq's GPU extra (pip install 'gpuq[gpu]'), not tensorflow-cpu"
    )
    assert checks["probes"]["detail"] == (
        "no framework here sees the GPUs: index agreement and caps are unchecked"
    )


def test_auto_without_a_driver_falls_back_and_says_why(monkeypatch, capsys):
    from service.gpus.nvml import NvmlUnavailable

    def no_driver():
        raise NvmlUnavailable("NVML is not usable here: NVML Shared Library Not Found")

    monkeypatch.setattr(inventory_module, "NvmlProbe", no_driver)
    monkeypatch.setenv("GPUQ_GPUS", "auto")
    code, report = doctor_json(capsys)
    assert code == 0 and report["simulated"]
    nvml = by_name(report)["NVML"]
    assert nvml["status"] == "skip"
    assert nvml["detail"] == (
        "not usable (NVML is not usable here: NVML Shared Library Not Found); "
        "GPUQ_GPUS=auto runs on 2 simulated GPUs of 16384 MiB"
    )


# --- judging a probe from NVML's readings ---------------------------------------------------


def a_probe(fake: FakeNvml, index: int = 0) -> Probe:
    reading = next(r for r in fake.read() if r.index == index)
    return Probe("torch", reading, headroom_mb=768, slack_mb=512)


def test_a_probe_on_its_gpu_alone_under_the_cap_passes():
    fake = FakeNvml(count=2, memory_mb=81559)
    job = a_probe(fake)
    fake.put(0, 4242, 2200)
    index, cap = judge_held(fake.read(), job, 4242, asked_mb=1664)
    assert (index.status, index.detail) == (
        "pass",
        "CUDA_VISIBLE_DEVICES=0 landed on GPU-fake-0 alone",
    )
    assert (cap.name, cap.status) == ("GPU 0 (PyTorch) cap", "pass")
    assert cap.detail == f"held 2200 MiB for 1664 MiB of data, cap {PROBE_CAP_MB} MiB"


def test_a_probe_seen_on_another_gpu_means_the_numbering_differs():
    fake = FakeNvml(count=2)
    job = a_probe(fake)
    fake.put(1, 4242, 2200)
    (check,) = judge_held(fake.read(), job, 4242, asked_mb=1664)
    assert (check.status, check.detail) == ("fail", "CUDA_VISIBLE_DEVICES=0 landed on NVML GPU 1")
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in check.hint


def test_a_probe_nvml_cannot_see_points_at_the_pid_namespace():
    fake = FakeNvml(count=1)
    (check,) = judge_held(fake.read(), a_probe(fake), 4242, asked_mb=1664)
    assert check.status == "fail"
    assert check.hint == (
        "gpuq must see the host's processes: in a container, run it with `pid: host`"
    )


def test_over_the_cap_the_framework_must_refuse():
    fake = FakeNvml(count=1)
    job = a_probe(fake)
    refused = judge_over(job, {"refused": True, "error": "OutOfMemoryError: ..."}, [], 1)
    assert refused.status == "pass"
    fake.put(0, 4242, 6500)
    granted = judge_over(job, {"refused": False}, fake.read(), 4242)
    assert granted.status == "fail"
    assert granted.detail == (
        f"{PROBE_CAP_MB} MiB more was granted (now 6500 MiB): the limit did not hold"
    )


def test_free_means_free_after_the_probe():
    fake = FakeNvml(count=1, baseline_mb=300)
    job = a_probe(fake)
    assert judge_released(fake, job, 4242).detail == (
        "back to 300 MiB used (300 MiB before the probe)"
    )
    fake.put(0, 4242, 900)  # its memory outlives it
    late = judge_released(fake, job, 4242, timeout_s=0.3)
    assert late.status == "fail"
    assert late.detail == (
        "0.3 s after the probe exited, 900 MiB more is used than before and pid 4242 is "
        "still listed"
    )


def test_a_gpu_without_room_for_the_probe_is_skipped():
    fake = FakeNvml(count=1, memory_mb=4096, baseline_mb=1000)
    (check,) = probe(fake, a_probe(fake))
    assert (check.status, check.detail) == (
        "skip",
        f"only 3096 MiB free; the probe needs {PROBE_CAP_MB}",
    )


@pytest.mark.parametrize(
    ("found", "status", "detail"),
    [
        (Framework("torch", True, "2.11.0", "13.0", 2), "pass", "2.11.0 (CUDA 13.0), sees 2 GPUs"),
        (
            Framework("torch", True, "2.11.0", "13.0", 1),
            "fail",
            "2.11.0 (CUDA 13.0) sees 1 GPUs, NVML 2",
        ),
        (Framework("jax", True, "0.11.2", None, 0), "fail", "0.11.2, a CPU build, sees no GPU"),
        (Framework("jax", False), "skip", "not installed"),
    ],
)
def test_each_framework_is_judged_by_what_it_sees(found, status, detail):
    (check,) = framework_checks([found], gpus=2, simulated=False)[:1]
    assert (check.status, check.detail) == (status, detail)


def test_no_framework_at_all_fails():
    checks = framework_checks([Framework("torch", False)], gpus=1, simulated=False)
    assert checks[-1].name == "frameworks" and checks[-1].status == "fail"


def test_a_job_whose_runner_the_launcher_forked_is_known_as_gpuq_s(tmp_path):
    """A forked runner keeps the launcher's command line; its run directory is its working
    directory, and that names the job."""
    run = RunDir(tmp_path / "runs" / "5" / "1")
    run.create()
    spec = JobSpec(kind="command", command={"argv": ["sleep", "30"]})
    run.spec.write_text(
        RunSpec(job_id=5, attempt=1, spec=spec, devices=DevicePlan.cpu()).model_dump_json()
    )
    ended = threading.Event()
    launcher = Launcher(ended.set)
    launcher.start()
    try:
        runner_pid = launcher.spawn(run.path, dict(os.environ))
        deadline = time.monotonic() + 10
        while not run.runner.exists():
            assert time.monotonic() < deadline, "the runner never started the job"
            time.sleep(0.01)
        train_pid = read_json(run.runner)["train_pid"]
        assert facts(train_pid, 100).job_id == 5
        assert facts(runner_pid, 100).job_id == 5
        assert facts(os.getpid(), 100).job_id is None  # this test's process: foreign
    finally:
        os.killpg(runner_pid, signal.SIGKILL)
        ended.wait(10)
        launcher.stop()
