"""The idle rule: a job that holds GPUs and trains no more is warned about, then ended.

With the NVML stand-in, memory held and utilisation decide beside the step reports; on
simulated GPUs without it, the step reports alone. Jobs here are `command` jobs that
report one epoch (a line in `$GPUQ_EVENTS`, as gpuq's Keras callback writes) and sleep.
"""

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import serving, wait_for
from tests.fakes import FakeNvml

#: Reports one epoch, leaves its pid where the test finds it, then sleeps (a hung job).
ONE_EPOCH_THEN_SLEEP = """
import json, os, time
open(os.path.join(os.environ["GPUQ_ARTIFACTS_DIR"], "pid"), "w").write(str(os.getpid()))
with open(os.environ["GPUQ_EVENTS"], "a") as events:
    events.write(json.dumps({"event": "epoch", "epoch": 1, "progress": {"epoch": 1},
                             "metrics": {"loss": 0.5}}) + "\\n")
time.sleep(120)
"""


def sleeper(**extra: Any) -> dict[str, Any]:
    resources = extra.pop("resources", {"gpus": 1})
    return {
        "name": "sleepy",
        "kind": "command",
        "command": {"argv": [sys.executable, "-c", ONE_EPOCH_THEN_SLEEP]},
        "resources": resources,
        **extra,
    }


@pytest.fixture
def idle_settings(settings):
    return settings.model_copy(
        update={
            "idle_after_s": 1.0,
            "idle_grace_s": 0.0,
            "idle_kill_after_s": 3.0,
            "sample_s": 0.2,
            "cancel_grace_s": 2.0,
            "webhook_allow": "127.0.0.1/32",  # the idle job's webhook
        }
    )


def pid_of(settings, job_id: int) -> int:
    path = settings.runs_dir / str(job_id) / "1" / "artifacts" / "pid"
    deadline = time.monotonic() + 30
    while not (path.exists() and path.read_text()):
        assert time.monotonic() < deadline, "the job never wrote its pid"
        time.sleep(0.05)
    return int(path.read_text())


def test_an_idle_job_is_warned_about_then_ended_and_busy_or_exempt_ones_are_not(idle_settings):
    fake = FakeNvml(count=2, memory_mb=8192)
    fake.utilization[1] = 90  # GPU 1 computes: its job is not idle, whatever its steps say
    with serving(idle_settings, probe=fake) as client:
        shared = {"gpu_ids": [0], "memory_mb": 2048}
        hung = client.post(
            "/v1/jobs", json=sleeper(resources=shared, webhook="http://127.0.0.1:9/hook")
        ).json()["id"]
        busy = client.post("/v1/jobs", json=sleeper(resources={"gpu_ids": [1]})).json()["id"]
        notebook = client.post(
            "/v1/jobs", json=sleeper(resources=shared, idle_exempt="a notebook, interactive")
        ).json()["id"]
        quiet = client.post("/v1/jobs", json=sleeper(resources=shared)).json()["id"]
        for job_id, gpu in ((hung, 0), (busy, 1), (notebook, 0)):
            fake.put(gpu, pid_of(idle_settings, job_id), 600)  # they hold GPU memory
        pid_of(idle_settings, quiet)  # holds none: it is not idle, whatever its steps say

        warned = wait_for(client, hung, lambda j: j["idle_since"] is not None, 30)
        assert warned["status"] == "running"
        [warning] = [w for w in warned["warnings"] if w.startswith("idle: ")]
        assert "no training step for" in warning and "while holding 1 GPU" in warning
        assert "stopped after 3 s more idle" in warning
        metrics = client.get("/metrics").text
        assert f'gpuq_job_idle_seconds{{job="{hung}",owner="anonymous"}}' in metrics
        deliveries = client.get(f"/v1/jobs/{hung}/webhooks").json()["deliveries"]
        assert "idle" in [d["event"] for d in deliveries]

        ended = wait_for(client, hung, lambda j: j["status"] == "failed", 30)
        assert ended["reason"] == "idle"
        assert ended["message"].startswith("no training step for")
        assert (
            "a hung all-reduce, a dead input pipeline or a finished notebook?" in (ended["message"])
        )
        for job_id in (busy, notebook, quiet):
            job = client.get(f"/v1/jobs/{job_id}").json()
            assert job["status"] == "running" and job["idle_since"] is None, job
            assert not [w for w in job["warnings"] if w.startswith("idle")]
            client.post(f"/v1/jobs/{job_id}/cancel")


def test_on_simulated_gpus_the_step_reports_alone_decide(idle_settings):
    with serving(idle_settings) as client:
        job_id = client.post("/v1/jobs", json=sleeper()).json()["id"]
        warned = wait_for(client, job_id, lambda j: j["idle_since"] is not None, 30)
        assert any(w.startswith("idle: no training step") for w in warned["warnings"])
        ended = wait_for(client, job_id, lambda j: j["status"] == "failed", 30)
    assert ended["reason"] == "idle"
    # SIGTERM first, as for a time limit: the sleeper dies of it within the grace.
    assert Path(idle_settings.runs_dir / str(job_id) / "1" / "exit.json").exists()


def test_without_a_kill_time_an_idle_job_is_only_warned_about(idle_settings):
    settings = idle_settings.model_copy(update={"idle_kill_after_s": 0.0})
    with serving(settings) as client:
        job_id = client.post("/v1/jobs", json=sleeper()).json()["id"]
        warned = wait_for(client, job_id, lambda j: j["idle_since"] is not None, 30)
        assert "it is not stopped for it (GPUQ_IDLE_KILL_AFTER_S=0)" in warned["warnings"][-1]
        time.sleep(2 * settings.idle_after_s)  # long enough to be stopped, were it to be
        assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "running"
        client.post(f"/v1/jobs/{job_id}/cancel")


def test_a_session_holding_gpus_with_nothing_on_them_is_idle_where_a_batch_job_is_not(
    idle_settings,
):
    with serving(idle_settings, probe=FakeNvml()) as client:
        quiet = client.post("/v1/jobs", json=sleeper()).json()["id"]
        forgotten = {
            "name": "forgotten-shell",
            "kind": "session",
            "command": {"argv": ["/bin/sh", "-c", "sleep 120"]},
            "resources": {"gpus": 1},
        }
        session = client.post("/v1/jobs", json=forgotten).json()["id"]
        ended = wait_for(client, session, lambda j: j["status"] == "failed", 30)
        assert ended["reason"] == "idle"
        job = client.get(f"/v1/jobs/{quiet}").json()
        assert job["status"] == "running" and job["idle_since"] is None, job
        client.post(f"/v1/jobs/{quiet}/cancel")
