"""Placement verified while jobs run: a job's process seen on a GPU it was not given.

The jobs are real processes; the NVML stand-in reports them on the GPU the test chooses,
as the driver would for a script that overrides `CUDA_VISIBLE_DEVICES`."""

import pytest

from gpuq.http import Client
from service.cli.app import main
from tests.conftest import command_spec, ended, wait_for
from tests.e2e.test_gpu_guard import SLEEP, guarded, submit, train_pid
from tests.e2e.test_prometheus import scrape
from tests.fakes import FakeNvml

pytestmark = pytest.mark.e2e


def test_off_its_gpus_under_warn_is_recorded_and_counted(settings, capsys):
    fake = FakeNvml()
    with guarded(settings, fake, off_gpu="warn") as client:
        job_id = submit(client, command_spec(SLEEP.format(30), gpu_ids=[0], memory_mb=2000))
        wait_for(client, job_id, lambda j: j["status"] == "running")
        pid = train_pid(settings, job_id)
        fake.put(0, pid, 900)
        fake.put(1, pid, 600)  # a stray `cuda:1`
        job = wait_for(client, job_id, lambda j: j["placement_violations"])
        assert job["placement_violations"] == [{"gpu": 1, "pids": [pid], "memory_mb": 600}]
        assert job["warnings"] == [
            f"pid {pid} used 600 MiB on GPU 1, which the job was not given (its GPUs: 0) "
            "(GPUQ_OFF_GPU=warn)"
        ]
        key = (("job", str(job_id)), ("owner", job["owner"]))
        assert scrape(client)["gpuq_job_placement_violations"] == {key: 1}

        # Said once per GPU, however long it stays; the job is not stopped for it.
        wait_for(client, job_id, lambda j: j["gpu_memory_peak_mb"] == 900)
        assert client.get(f"/v1/jobs/{job_id}").json()["warnings"] == job["warnings"]
        assert main(["show", str(job_id)], api=Client(http=client)) == 0
        shown = capsys.readouterr().out.splitlines()
        assert "  GPU memory peak: 900 MiB" in shown
        assert f"  warning: {job['warnings'][0]}" in shown
        assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
        assert wait_for(client, job_id, ended)["status"] == "cancelled"


def test_off_its_gpus_under_kill_ends_the_job_with_a_hint(settings):
    fake = FakeNvml()
    with guarded(settings, fake, off_gpu="kill") as client:
        job_id = submit(client, command_spec(SLEEP.format(60), gpu_ids=[1], memory_mb=2000))
        wait_for(client, job_id, lambda j: j["status"] == "running")
        pid = train_pid(settings, job_id)
        fake.put(0, pid, 1200)
        job = wait_for(client, job_id, ended, timeout_s=20)
        assert (job["status"], job["reason"]) == ("failed", "placement_violation")
        assert job["message"] == (
            f"pid {pid} used 1200 MiB on GPU 0, which the job was not given (its GPUs: 1): "
            "use only the GPUs gpuq gives the job: leave CUDA_VISIBLE_DEVICES as it is and "
            "address them as cuda:0 to cuda:N-1"
        )
        assert job["placement_violations"] == [{"gpu": 0, "pids": [pid], "memory_mb": 1200}]
        assert job["warnings"] == [
            f"pid {pid} used 1200 MiB on GPU 0, which the job was not given (its GPUs: 1) "
            "(GPUQ_OFF_GPU=kill)"
        ]
        fake.remove(pid)
        ended_by = scrape(client)["gpuq_jobs_ended"]
        assert ended_by[(("reason", "placement_violation"),)] == 1


def test_a_cpu_job_seen_on_a_gpu_is_off_its_placement(settings):
    fake = FakeNvml()
    with guarded(settings, fake) as client:  # GPUQ_OFF_GPU=kill is the default
        job_id = submit(client, command_spec(SLEEP.format(60), gpus=0))
        job = wait_for(client, job_id, lambda j: j["status"] == "running")
        assert job["assigned_gpus"] == []
        pid = train_pid(settings, job_id)
        fake.put(1, pid, 300)
        job = wait_for(client, job_id, ended, timeout_s=20)
        assert (job["status"], job["reason"]) == ("failed", "placement_violation")
        assert job["message"].startswith(
            f"pid {pid} used 300 MiB on GPU 1, which the job was not given (its GPUs: none): "
        )
