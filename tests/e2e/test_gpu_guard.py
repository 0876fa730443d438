"""Caps enforced and "free means free", with an NVML stand-in reporting chosen memory.

The jobs are real processes; only the GPU readings are stood in for (no GPU here).
"""

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient

from tests.conftest import command_spec, ended, serving, wait_for
from tests.fakes import FakeNvml

pytestmark = pytest.mark.e2e
SLEEP = "import time; time.sleep({})"


@contextmanager
def guarded(settings, fake: FakeNvml, **overrides) -> Iterator[TestClient]:
    settings = settings.model_copy(update={"sample_s": 0.1, "drain_timeout_s": 1.5, **overrides})
    with serving(settings, probe=fake) as client:
        yield client


def submit(client, spec) -> int:
    response = client.post("/v1/jobs", json=spec)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def train_pid(settings, job_id: int) -> int:
    path = settings.runs_dir / str(job_id) / "1" / "runner.json"
    return json.loads(path.read_text())["train_pid"]


def gpu(client, index: int) -> dict:
    return client.get("/v1/gpus").json()[index]


def wait_gpu(client, index: int, state: str, timeout_s: float = 10) -> dict:
    deadline = time.monotonic() + timeout_s
    while (seen := gpu(client, index))["state"] != state:
        assert time.monotonic() < deadline, f"GPU {index} never became {state}: {seen}"
        time.sleep(0.1)
    return seen


def test_a_foreign_process_blocks_placement_until_it_goes(settings):
    fake = FakeNvml()
    fake.put(0, 999_999, 7000)  # someone else's process, not started by gpuq
    with guarded(settings, fake) as client:
        assert gpu(client, 0)["foreign_processes"] == [{"pid": 999_999, "memory_mb": 7000}]
        assert gpu(client, 0)["memory_free_mb"] == 1192
        job_id = submit(client, command_spec(SLEEP.format(0), gpu_ids=[0], memory_mb=2000))
        job = wait_for(client, job_id, lambda j: j["wait_reason"] is not None)
        assert job["wait_reason"] == (
            "waiting for GPUs 0 with 2000 MiB free; GPU 0 has 1192 MiB free"
        )
        fake.remove(999_999)
        assert wait_for(client, job_id, ended)["status"] == "succeeded"


def test_over_the_cap_under_kill_ends_the_job(settings):
    fake = FakeNvml()
    with guarded(settings, fake, over_cap="kill") as client:
        job_id = submit(client, command_spec(SLEEP.format(60), gpus=1, memory_mb=2000))
        job = wait_for(client, job_id, lambda j: j["status"] == "running")
        pid = train_pid(settings, job_id)
        fake.put(job["assigned_gpus"][0], pid, 1500)
        wait_for(client, job_id, lambda j: j["gpu_memory_peak_mb"] == 1500)
        fake.put(job["assigned_gpus"][0], pid, 2500)
        job = wait_for(client, job_id, ended, timeout_s=20)
        assert (job["status"], job["reason"]) == ("failed", "memory_cap_exceeded")
        assert job["message"] == (
            f"used 2500 MiB on GPU {job['assigned_gpus'][0]}, over its cap of 2000 MiB: "
            "raise memory_mb or lower batch_size"
        )
        assert job["gpu_memory_peak_mb"] == 2500


def test_over_the_cap_under_warn_flags_the_job_and_lets_it_finish(settings):
    fake = FakeNvml()
    with guarded(settings, fake, over_cap="warn") as client:
        job_id = submit(client, command_spec(SLEEP.format(3), gpus=1, memory_mb=2000))
        job = wait_for(client, job_id, lambda j: j["status"] == "running")
        fake.put(job["assigned_gpus"][0], train_pid(settings, job_id), 2600)
        job = wait_for(client, job_id, lambda j: j["warnings"])
        assert job["warnings"] == [
            f"used 2600 MiB on GPU {job['assigned_gpus'][0]}, over its cap of 2000 MiB "
            "(GPUQ_OVER_CAP=warn)"
        ]
        fake.remove(train_pid(settings, job_id))
        job = wait_for(client, job_id, ended)
        assert job["status"] == "succeeded"
        assert job["gpu_memory_peak_mb"] == 2600


def test_a_gpu_drains_after_a_job_and_is_quarantined_if_memory_stays(settings):
    fake = FakeNvml()
    with guarded(settings, fake) as client:
        first = submit(client, command_spec(SLEEP.format(1.5), gpu_ids=[0]))
        wait_for(client, first, lambda j: j["status"] == "running")
        stuck_pid = train_pid(settings, first)
        fake.put(0, stuck_pid, 3000)
        wait_for(client, first, lambda j: j["gpu_memory_peak_mb"] == 3000)
        assert wait_for(client, first, ended)["status"] == "succeeded"

        # The process is gone but NVML still shows its memory: not free yet.
        state = gpu(client, 0)
        assert (state["state"], state["state_reason"]) == (
            "draining",
            f"draining after job {first}",
        )
        second = submit(client, command_spec(SLEEP.format(0), gpu_ids=[0]))
        waiting = wait_for(client, second, lambda j: j["wait_reason"] is not None)
        assert waiting["wait_reason"].endswith(f"GPU 0 is draining after job {first}")

        quarantined = wait_gpu(client, 0, "quarantined")
        assert quarantined["state_reason"].startswith(
            f"3000 MiB still held by pid {stuck_pid} of job {first}"
        )
        assert client.get(f"/v1/jobs/{second}").json()["status"] == "queued"

        fake.remove(stuck_pid)
        released = client.post("/v1/gpus/0/release")
        assert released.status_code == 200
        assert released.json()["state"] in ("free", "in_use")
        assert wait_for(client, second, ended)["status"] == "succeeded"


def test_a_gpu_drains_back_to_free_when_memory_returns(settings):
    fake = FakeNvml()
    with guarded(settings, fake, drain_timeout_s=60) as client:
        job_id = submit(client, command_spec(SLEEP.format(1), gpu_ids=[1]))
        wait_for(client, job_id, lambda j: j["status"] == "running")
        pid = train_pid(settings, job_id)
        fake.put(1, pid, 1000)
        wait_for(client, job_id, lambda j: j["gpu_memory_peak_mb"] == 1000)
        wait_for(client, job_id, ended)
        assert gpu(client, 1)["state"] == "draining"
        fake.remove(pid)
        wait_gpu(client, 1, "free")
        assert client.post("/v1/gpus/1/release").status_code == 409
        assert client.post("/v1/gpus/9/release").status_code == 404
