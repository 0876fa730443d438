"""Real TensorFlow training in worker processes on simulated GPUs (`sim:2x8GiB`)."""

import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import ended, job_spec, wait_for
from tests.processes import gone

pytestmark = pytest.mark.e2e

#: a builtin job's message when it crashed: where, as its stack in the log says
CRASHED = (
    r"the training process crashed \(SIGSEGV\) (in|outside Python, its main thread in) "
    r"[\w<>.]+ \(.+:\d+\); the stack is in the log"
)


def events(settings, job: dict) -> list[dict]:
    path = settings.runs_dir / str(job["id"]) / str(job["attempt"]) / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def submit(client, **overrides) -> int:
    response = client.post("/v1/jobs", json=job_spec(**overrides))
    assert response.status_code == 201, response.text
    return response.json()["id"]


def test_a_two_gpu_job_trains_with_two_replicas_and_saves_a_loadable_model(client, settings):
    job_id = submit(client, resources={"gpus": 2}, keras={"epochs": 3, "validation_split": 0.25})
    job = wait_for(client, job_id, ended)

    assert job["status"] == "succeeded", job
    assert job["assigned_gpus"] == [0, 1]
    assert job["num_replicas"] == 2
    assert job["exit_code"] == 0 and job["reason"] is None
    assert job["progress"]["epoch"] == 3 and job["progress"]["fraction"] == 1.0
    assert job["progress"]["samples_per_s"] > 0
    assert set(job["metrics"]) == {"loss", "mae", "val_loss", "val_mae"}
    assert job["started_at"] <= job["running_at"] <= job["finished_at"]

    started = next(e for e in events(settings, job) if e["event"] == "started")
    assert started["num_replicas"] == 2
    assert started["cuda_visible_devices"] == "0,1"
    assert len(started["devices"]) == 2

    history = client.get(f"/v1/jobs/{job_id}/metrics").json()
    assert [e["epoch"] for e in history["epochs"]] == [1, 2, 3]
    assert all("loss" in e and "val_loss" in e for e in history["epochs"])
    assert history["steps"] and history["steps"][0]["step"] == 1

    # Nothing in the log but training: no warning of Keras's about how it was called.
    assert "UserWarning" not in (settings.runs_dir / str(job_id) / "1" / "output.log").read_text()

    model = settings.runs_dir / str(job_id) / "1" / "artifacts" / "model.keras"
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import keras; m = keras.saving.load_model({str(model)!r}); "
            "print(m.input_shape, m.output_shape)",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip().splitlines()[-1] == "(None, 8) (None, 1)"

    gpus = client.get("/v1/gpus").json()
    assert [g["state"] for g in gpus] == ["free", "free"]


def test_two_single_gpu_jobs_share_the_box_and_a_third_waits(client, settings):
    ids = [submit(client, name=f"j{i}", keras={"epochs": 4}) for i in range(3)]
    first = wait_for(client, ids[0], lambda j: j["status"] in ("starting", "running"))
    second = wait_for(client, ids[1], lambda j: j["status"] in ("starting", "running"))
    third = wait_for(client, ids[2], lambda j: j["wait_reason"] is not None)
    assert {first["assigned_gpus"][0], second["assigned_gpus"][0]} == {0, 1}
    assert third["status"] == "queued"
    assert third["wait_reason"].startswith("waiting for 1 GPU whole; GPU 0 is held whole by job")

    gpus = client.get("/v1/gpus").json()
    assert [g["state"] for g in gpus] == ["in_use", "in_use"]
    assert {a["job_id"] for g in gpus for a in g["allocations"]} == set(ids[:2])

    done = [wait_for(client, i, ended) for i in ids]
    assert [j["status"] for j in done] == ["succeeded"] * 3
    assert done[2]["started_at"] >= min(done[0]["finished_at"], done[1]["finished_at"])
    cvd = {events(settings, j)[0]["cuda_visible_devices"] for j in done[:2]}
    assert cvd == {"0", "1"}


def test_capped_jobs_pack_onto_one_gpu_when_their_memory_fits(client, settings):
    on_gpu0 = {"gpu_ids": [0]}
    a = submit(client, resources={**on_gpu0, "memory_mb": 5000}, keras={"epochs": 3})
    b = submit(client, resources={**on_gpu0, "memory_mb": 3000}, keras={"epochs": 3})
    c = submit(client, resources={**on_gpu0, "memory_mb": 4000})
    job_a = wait_for(client, a, lambda j: j["status"] != "queued")
    job_b = wait_for(client, b, lambda j: j["status"] != "queued")
    job_c = wait_for(client, c, lambda j: j["wait_reason"] is not None)
    assert job_a["assigned_gpus"] == job_b["assigned_gpus"] == [0]
    assert job_c["status"] == "queued"
    assert job_c["wait_reason"] == "waiting for GPUs 0 with 4000 MiB free; GPU 0 has 192 MiB free"

    gpu0 = client.get("/v1/gpus").json()[0]
    assert sorted(x["memory_mb"] for x in gpu0["allocations"]) == [3000, 5000]
    assert gpu0["memory_free_mb"] == 192

    done = [wait_for(client, i, ended) for i in (a, b, c)]
    assert [j["status"] for j in done] == ["succeeded"] * 3
    # The cap handed to TensorFlow is memory_mb minus the context/workspace headroom.
    assert events(settings, done[0])[0]["memory_limit_mb"] == 5000 - settings.gpu_headroom_mb


def test_cancel_stops_a_running_job_and_frees_its_gpu(client, settings):
    job_id = submit(client, keras={"epochs": 100_000})
    running = wait_for(client, job_id, lambda j: j["status"] == "running")
    response = client.post(f"/v1/jobs/{job_id}/cancel")
    assert response.status_code == 202

    job = wait_for(client, job_id, ended, timeout_s=settings.cancel_grace_s + 20)
    assert (job["status"], job["reason"]) == ("cancelled", "cancelled_by_user")
    # SIGTERM let training stop after its batch and save, well inside the grace period.
    assert job["exit_code"] == 75
    assert "gpuq: stopped on SIGTERM after the current batch; model saved" in job["log_tail"]
    assert (settings.runs_dir / str(job_id) / "1" / "artifacts" / "model.keras").exists()
    runner = json.loads((settings.runs_dir / str(job_id) / "1" / "runner.json").read_text())
    for pid in (runner["runner_pid"], runner["train_pid"]):
        assert gone(pid), f"pid {pid} still runs"
    assert client.get("/v1/gpus").json()[running["assigned_gpus"][0]]["state"] == "free"
    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 409


def test_a_job_past_its_time_limit_ends_timed_out(client):
    job_id = submit(client, time_limit_s=4, keras={"epochs": 100_000})
    job = wait_for(client, job_id, ended)
    assert (job["status"], job["reason"]) == ("timed_out", "time_limit")


def test_npz_data_trains_and_a_worker_error_is_explained(client, tmp_path):
    path = tmp_path / "data.npz"
    rng = np.random.default_rng(0)
    np.savez(path, x=rng.standard_normal((128, 8)), y=rng.standard_normal((128, 1)))
    data = {"source": "npz", "path": str(path)}
    good = submit(client, keras={"data": data}, resources={"gpus": 0})
    assert wait_for(client, good, ended)["status"] == "succeeded"

    broken = submit(client, keras={"data": data})
    path.unlink()  # gone between submit and start: the worker must say so
    job = wait_for(client, broken, ended)
    assert (job["status"], job["reason"]) == ("failed", "nonzero_exit")
    assert "FileNotFoundError" in job["message"]
    assert any("FileNotFoundError" in line for line in job["log_tail"])
    assert job["exit_code"] == 1


def test_a_cnn_on_one_gpu_split_into_two_virtual_gpus(client, settings):
    keras = {
        "model": {
            "builtin": "cnn",
            "filters": [4],
            "dense_units": [8],
            "outputs": 3,
            "output_activation": "softmax",
        },
        "data": {
            "source": "synthetic",
            "samples": 128,
            "image_shape": [8, 8, 1],
            "task": "classification",
            "classes": 3,
        },
        "loss": "sparse_categorical_crossentropy",
        "metrics": ["accuracy"],
    }
    job_id = submit(
        client, keras=keras, resources={"gpus": 1, "replicas_per_gpu": 2, "memory_mb": 4096}
    )
    job = wait_for(client, job_id, ended)
    assert job["status"] == "succeeded", job["log_tail"]
    assert len(job["assigned_gpus"]) == 1
    assert job["num_replicas"] == 2
    started = events(settings, job)[0]
    assert started["memory_limit_mb"] == (4096 - settings.gpu_headroom_mb) // 2
    assert set(job["metrics"]) == {"loss", "accuracy"}


def test_a_keras_json_model_trains_on_csv_data_with_the_placement_log(client, tmp_path):
    import keras as keras_lib  # the test builds the JSON a user would send

    inputs = keras_lib.Input((3,))
    hidden = keras_lib.layers.Dense(8, activation="relu")(inputs)
    outputs = keras_lib.layers.Dense(1)(keras_lib.layers.Concatenate()([hidden, inputs]))
    model_json = keras_lib.Model(inputs, outputs).to_json()

    rng = np.random.default_rng(1)
    rows = rng.standard_normal((64, 4))
    path = tmp_path / "table.csv"
    path.write_text("a,b,c,target\n" + "\n".join(",".join(f"{v:.4f}" for v in r) for r in rows))
    spec = {
        "model": {"keras_json": model_json},
        "data": {"source": "csv", "path": str(path), "label": "target"},
        "log_device_placement": True,
    }
    job = wait_for(client, submit(client, keras=spec, resources={"gpus": 0}), ended)
    assert job["status"] == "succeeded", job["log_tail"]
    log = client.get(f"/v1/jobs/{job['id']}/logs").text
    assert "VarHandleOp: (VarHandleOp): /job:localhost/replica:0/task:0/device:CPU:0" in log


def test_a_keras_json_model_whose_inputs_do_not_fit_the_data_is_invalid(client):
    import keras as keras_lib

    model_json = keras_lib.Sequential([keras_lib.Input((5,)), keras_lib.layers.Dense(1)]).to_json()
    job_id = submit(client, keras={"model": {"keras_json": model_json}}, resources={"gpus": 0})
    job = wait_for(client, job_id, ended)
    assert (job["status"], job["reason"]) == ("failed", "invalid_spec")
    assert job["message"] == (
        "the model takes inputs shaped (5,) but the data's are shaped (8,): "
        "check the job spec against the API docs at /docs"
    )


def test_a_training_process_that_crashes_leaves_its_stack_and_says_where(client, settings):
    job_id = submit(client, keras={"epochs": 100_000})
    job = wait_for(client, job_id, lambda j: j["status"] == "running")
    run = settings.runs_dir / str(job_id) / "1"
    os.kill(json.loads((run / "runner.json").read_text())["train_pid"], signal.SIGSEGV)
    job = wait_for(client, job_id, ended)
    assert (job["status"], job["reason"], job["exit_signal"]) == ("failed", "signal", 11)
    assert re.fullmatch(CRASHED, job["message"]), job["message"]
    assert "Fatal Python error: Segmentation fault" in (run / "output.log").read_text()
