"""Warm workers (GPUQ_WARM_WORKERS): builtin jobs start on a training process that imported
TensorFlow ahead of need, with exactly the devices and cap of a cold start; real launcher,
standby runners and TensorFlow on simulated GPUs."""

import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.runtime import Service, open_with_scheduler
from tests.conftest import ended, job_spec, local_client, wait_for
from tests.e2e.test_training import CRASHED
from tests.processes import gone
from worker import warm_pool

pytestmark = pytest.mark.e2e

#: a warm process imports TensorFlow in a few seconds; on a loaded 2-core box, longer
READY_S = 120


@pytest.fixture
def warm(settings) -> Iterator[tuple[TestClient, Service]]:
    settings = settings.model_copy(update={"warm_workers": 1})
    service = open_with_scheduler(settings)
    try:
        with local_client(create_app(settings, service)) as client:
            yield client, service
    finally:
        service.close()


def ready_worker(service: Service, other_than: int | None = None) -> int:
    """The pid of the pool's warm process once it is ready (and not `other_than`)."""
    executor = service.scheduler.books.executor  # the scheduler runs in this process
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        ready = [s.worker_pid for s in executor.standbys() if s.worker_pid is not None]
        if ready and ready[0] != other_than:
            return ready[0]
        time.sleep(0.1)
    raise AssertionError(f"no warm process got ready; the pool: {executor.standbys()}")


def run_files(service: Service, job: dict[str, Any]) -> dict[str, Any]:
    run = service.settings.runs_dir / str(job["id"]) / str(job["attempt"])
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    return {
        "launch": json.loads((run / "launch.json").read_text()),
        "runner": json.loads((run / "runner.json").read_text()),
        "started": next((e for e in events if e["event"] == "started"), None),
    }


def test_a_warm_job_sees_exactly_its_devices_and_cap_and_its_worker_is_used_once(warm):
    client, service = warm
    first = ready_worker(service)
    capped = job_spec(resources={"gpus": 1, "memory_mb": 2048})
    one = wait_for(client, client.post("/v1/jobs", json=capped).json()["id"], ended)
    assert one["status"] == "succeeded", one
    files = run_files(service, one)
    assert files["launch"]["warm_pid"] == first == files["runner"]["train_pid"]
    started = files["started"]
    assert started["cuda_visible_devices"] == str(one["assigned_gpus"][0])
    assert len(started["devices"]) == 1 == started["num_replicas"]
    assert started["memory_limit_mb"] == 2048 - service.settings.gpu_headroom_mb

    # A fresh one started behind it; the used one is gone, never to take a second job.
    second = ready_worker(service, other_than=first)
    assert gone(first)
    two = wait_for(
        client, client.post("/v1/jobs", json=job_spec(resources={"gpus": 2})).json()["id"], ended
    )
    assert two["status"] == "succeeded", two
    files = run_files(service, two)
    assert files["runner"]["train_pid"] == second
    assert files["started"]["cuda_visible_devices"] == "0,1"
    assert len(files["started"]["devices"]) == 2 == files["started"]["num_replicas"]
    assert files["started"]["memory_limit_mb"] is None


def test_cancel_the_time_limit_and_a_crash_end_a_warm_job_cleanly(warm):
    client, service = warm
    worker = ready_worker(service)
    job_id = client.post("/v1/jobs", json=job_spec(keras={"epochs": 100_000})).json()["id"]
    wait_for(client, job_id, lambda j: j["status"] == "running")
    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
    job = wait_for(client, job_id, ended, timeout_s=service.settings.cancel_grace_s + 30)
    assert (job["status"], job["reason"], job["exit_code"]) == (
        "cancelled",
        "cancelled_by_user",
        75,
    )
    assert "gpuq: stopped on SIGTERM after the current batch; model saved" in job["log_tail"]
    assert run_files(service, job)["runner"]["train_pid"] == worker
    assert gone(worker)

    worker = ready_worker(service, other_than=worker)
    limited = job_spec(time_limit_s=4, keras={"epochs": 100_000})
    job = wait_for(client, client.post("/v1/jobs", json=limited).json()["id"], ended)
    assert (job["status"], job["reason"]) == ("timed_out", "time_limit")
    assert run_files(service, job)["runner"]["train_pid"] == worker
    assert gone(worker)

    # A crash of a warm process leaves its stack in the job's log, as a cold one does.
    worker = ready_worker(service, other_than=worker)
    job_id = client.post("/v1/jobs", json=job_spec(keras={"epochs": 100_000})).json()["id"]
    wait_for(client, job_id, lambda j: j["status"] == "running")
    os.kill(worker, signal.SIGSEGV)
    job = wait_for(client, job_id, ended)
    assert (job["status"], job["reason"], job["exit_signal"]) == ("failed", "signal", 11)
    assert re.fullmatch(CRASHED, job["message"]), job["message"]
    assert run_files(service, job)["runner"]["train_pid"] == worker


def test_a_warm_worker_killed_while_idle_is_replaced_and_shows_in_metrics(warm):
    client, service = warm
    worker = ready_worker(service)
    metrics = client.get("/metrics").text
    assert 'gpuq_warm_workers{state="ready"} 1.0' in metrics
    held = next(
        line for line in metrics.splitlines() if line.startswith("gpuq_warm_workers_memory")
    )
    assert float(held.split()[1]) > 100 * 2**20  # TensorFlow imported: hundreds of MiB

    os.kill(worker, signal.SIGKILL)
    replacement = ready_worker(service, other_than=worker)
    assert replacement != worker
    # The job still gets a warm start.
    job = wait_for(client, client.post("/v1/jobs", json=job_spec()).json()["id"], ended)
    assert job["status"] == "succeeded", job
    assert run_files(service, job)["runner"]["train_pid"] == replacement


def test_the_pool_restarts_when_gpuqs_code_changes_and_ends_with_the_service(settings):
    settings = settings.model_copy(update={"warm_workers": 1})
    service = open_with_scheduler(settings)
    code = Path(warm_pool.__file__)
    before = code.stat()
    with TestClient(create_app(settings, service)):
        worker = ready_worker(service)
        # The checkout is the machine's: no other file's tests run warm processes from it,
        # so `make test`'s other worker never sees this change (tests/conftest.py: TOGETHER).
        os.utime(code, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
        try:
            fresh = ready_worker(service, other_than=worker)
            assert gone(worker)
        finally:
            os.utime(code, ns=(before.st_atime_ns, before.st_mtime_ns))
        last = ready_worker(service, other_than=fresh)  # the code changed back
    service.close()
    deadline = time.monotonic() + 10
    while not gone(last) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone(last), "a warm process outlived the service"
