"""`gpuq serve` as a real process, driven by the `gpuq` CLI over HTTP."""

import json
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.conftest import job_spec
from tests.e2e.server import GPUQ, Server, free_port

pytestmark = pytest.mark.e2e


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path / "gpuq")
    srv.start()
    yield srv
    if srv.proc and srv.proc.poll() is None:
        srv.kill()


def test_the_cli_walkthrough_and_a_server_killed_mid_training(server, tmp_path):
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(yaml.safe_dump(job_spec(name="cli-demo", keras={"epochs": 12})))
    assert server.cli("submit", str(spec_file)) == "submitted job 1 (cli-demo): queued\n"

    listing = server.cli("ls")
    assert listing.splitlines()[0].split() == [
        "ID",
        "NAME",
        "OWNER",
        "STATUS",
        "GPUS",
        "PROGRESS/REASON",
        "SUBMITTED",
    ]
    assert "cli-demo" in listing

    server.wait(1, {"running"})
    assert "in_use" in server.cli("gpus")

    # The service dies hard mid-training; the job's runner carries on, and a new service
    # re-adopts it and records the rest of its epochs.
    server.kill(signal.SIGKILL)
    server.start()
    job = server.wait(1, {"succeeded", "failed"})
    assert job["status"] == "succeeded", job
    epochs = httpx.get(f"{server.url}/v1/jobs/1/metrics").json()["epochs"]
    assert [e["epoch"] for e in epochs] == list(range(1, 13))

    shown = server.cli("show", "1")
    assert shown.startswith("job 1 (cli-demo) by anonymous: succeeded")
    assert re.search(r"^  GPUs: [01], 1 replica$", shown, re.MULTILINE), shown
    assert "progress: epoch 12/12 100%" in shown
    whole = server.cli("logs", "1")
    assert whole == httpx.get(f"{server.url}/v1/jobs/1/logs").text
    assert server.cli("logs", "1", "--tail", "2").splitlines() == whole.splitlines()[-2:]

    queued = json.loads(server.cli("submit", str(spec_file), "--json"))
    assert server.cli("cancel", str(queued["id"])) in (
        f"job {queued['id']} cancelled\n",
        f"job {queued['id']} is stopping (SIGTERM sent; SIGKILL after the grace period)\n",
    )


def test_follow_streams_the_log_while_the_job_runs_and_closes_at_the_end(server):
    response = httpx.post(f"{server.url}/v1/jobs", json=job_spec(keras={"epochs": 6}))
    job_id = response.json()["id"]
    seen_while_running = None
    text = b""
    with httpx.stream(
        "GET", f"{server.url}/v1/jobs/{job_id}/logs", params={"follow": "true"}, timeout=120
    ) as stream:
        for chunk in stream.iter_bytes():
            text += chunk
            if seen_while_running is None and b"gpuq: epoch 1/6" in text:
                seen_while_running = server.job(job_id)["status"]
    assert seen_while_running == "running", "the first epoch line came only after the end"
    assert server.job(job_id)["status"] == "succeeded", "the stream closed before the end"
    assert text.decode().endswith("model.keras\n")
    assert text == httpx.get(f"{server.url}/v1/jobs/{job_id}/logs").content


def test_cli_errors_are_clear(server, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(job_spec(resources={"gpus": 5})))
    done = subprocess.run(
        [*GPUQ, "submit", str(bad)], env=server.env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert done.stderr == "gpuq: 422: resources.gpus: 5 GPUs requested but this box has 2\n"

    down = {**server.env, "GPUQ_URL": f"http://127.0.0.1:{free_port()}"}
    done = subprocess.run([*GPUQ, "ls"], env=down, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "cannot reach gpuq at" in done.stderr and "is `gpuq serve` running?" in done.stderr


def test_a_second_server_on_the_same_state_refuses_to_schedule(server):
    other = Server(server.home)
    done = subprocess.run(
        [*GPUQ, "serve"], env=other.env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert "another gpuq serve is already scheduling jobs" in done.stderr
