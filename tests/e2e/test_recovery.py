"""Processes really killed: the job is judged quickly, frees its GPU, and retries resume."""

import json
import os
import signal
import time

import pytest

from tests.conftest import command_spec, ended, job_spec, wait_for
from tests.processes import gone

pytestmark = pytest.mark.e2e
#: What the database is in the middle of: judging an exit, requeueing, metrics per epoch.
BOTH = pytest.mark.backends("sqlite", "postgres")


def submit(client, spec) -> int:
    response = client.post("/v1/jobs", json=spec)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def runner_info(settings, job_id: int, attempt: int = 1) -> dict:
    path = settings.runs_dir / str(job_id) / str(attempt) / "runner.json"
    deadline = time.monotonic() + 30
    while not path.exists():
        assert time.monotonic() < deadline, "the runner never wrote runner.json"
        time.sleep(0.05)
    return json.loads(path.read_text())


@BOTH
def test_a_killed_training_process_fails_the_job_with_signal_quickly(client, settings):
    job_id = submit(client, command_spec("import time; time.sleep(120)", gpu_ids=[0]))
    wait_for(client, job_id, lambda j: j["status"] == "running")
    os.kill(runner_info(settings, job_id)["train_pid"], signal.SIGKILL)
    killed_at = time.monotonic()
    job = wait_for(client, job_id, ended, timeout_s=5)
    assert time.monotonic() - killed_at < 5
    assert (job["status"], job["reason"]) == ("failed", "signal")
    assert job["message"].startswith("the program was killed by SIGKILL")
    assert client.get("/v1/gpus").json()[0]["state"] == "free"


@BOTH
def test_a_killed_runner_is_a_lost_worker_and_its_orphan_is_stopped(client, settings):
    job_id = submit(client, command_spec("import time; time.sleep(120)", gpu_ids=[1]))
    wait_for(client, job_id, lambda j: j["status"] == "running")
    info = runner_info(settings, job_id)
    os.kill(info["runner_pid"], signal.SIGKILL)
    job = wait_for(client, job_id, ended, timeout_s=5)
    assert (job["status"], job["reason"]) == ("failed", "worker_lost")
    deadline = time.monotonic() + 5
    while not gone(info["train_pid"]):
        assert time.monotonic() < deadline, "the training process outlived its runner"
        time.sleep(0.05)
    assert client.get("/v1/gpus").json()[1]["state"] == "free"


def test_a_checkpoint_cut_short_by_the_kill_resumes_from_the_one_before(client, settings):
    """A SIGKILL in the middle of writing a checkpoint leaves half a file; the retry must
    fall back to the previous checkpoint instead of failing to load it."""
    keras = {"epochs": 8, "data": {"source": "synthetic", "samples": 4096, "features": 8}}
    job_id = submit(client, job_spec(keras=keras, max_retries=1))
    wait_for(client, job_id, lambda j: (j["progress"].get("epoch") or 0) >= 3, timeout_s=120)
    os.kill(runner_info(settings, job_id)["train_pid"], signal.SIGKILL)
    # What the kill would have left mid-write (the retry starts 0.5 s later at the soonest).
    latest = settings.runs_dir / str(job_id) / "1" / "checkpoints" / "latest.weights.h5"
    latest.write_bytes(latest.read_bytes()[:100])

    job = wait_for(client, job_id, ended, timeout_s=120)
    assert job["status"] == "succeeded", job["log_tail"]
    assert job["attempt"] == 2
    history = client.get(f"/v1/jobs/{job_id}/metrics").json()["epochs"]
    assert [e["epoch"] for e in history] == list(range(1, 9)), "each epoch exactly once"


@BOTH
def test_a_retry_resumes_after_the_last_checkpointed_epoch(client, settings):
    keras = {"epochs": 8, "data": {"source": "synthetic", "samples": 4096, "features": 8}}
    job_id = submit(client, job_spec(keras=keras, max_retries=1))
    wait_for(client, job_id, lambda j: (j["progress"].get("epoch") or 0) >= 3, timeout_s=120)
    os.kill(runner_info(settings, job_id)["train_pid"], signal.SIGKILL)

    job = wait_for(client, job_id, ended, timeout_s=120)
    assert job["status"] == "succeeded", job["log_tail"]
    assert job["attempt"] == 2
    first = job["previous_attempts"][0]
    assert (first["attempt"], first["reason"]) == (1, "signal")

    def events(attempt: int) -> list[dict]:
        path = settings.runs_dir / str(job_id) / str(attempt) / "events.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]

    done_before = max(e["epoch"] for e in events(1) if e["event"] == "epoch")
    resumed = next(e for e in events(2) if e["event"] == "resumed")
    second_epochs = [e["epoch"] for e in events(2) if e["event"] == "epoch"]
    # It starts right after the last checkpoint: the last reported epoch, or that one
    # again when the kill came between its report and its checkpoint.
    assert resumed["epoch"] in (done_before, done_before + 1)
    assert resumed["epoch"] > 1
    assert second_epochs == list(range(resumed["epoch"], 9))
    history = client.get(f"/v1/jobs/{job_id}/metrics").json()["epochs"]
    assert [e["epoch"] for e in history] == list(range(1, 9)), "each epoch exactly once"
    log = client.get(f"/v1/jobs/{job_id}/logs").text
    assert f"gpuq: resumed from the checkpoint of epoch {resumed['epoch'] - 1}" in log


TF_OOM = "import tensorflow as tf; tf.zeros((2**40,), tf.float32)"


def test_a_tensorflow_out_of_memory_error_is_diagnosed(client):
    job = wait_for(client, submit(client, command_spec(TF_OOM, gpus=1)), ended)
    assert (job["status"], job["reason"]) == ("failed", "gpu_oom")
    assert "OOM when allocating tensor" in job["message"]
    assert job["message"].endswith("lower batch_size or raise memory_mb")
    assert any("ResourceExhaustedError" in line for line in job["log_tail"])
