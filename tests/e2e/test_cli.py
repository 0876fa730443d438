"""`gpuq serve` as a real process, driven by the `gpuq` CLI over HTTP."""

import json
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.conftest import command_spec, job_spec
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
    # Long enough that it still trains through the checks below, under a loaded machine's
    # CLI start-ups too (12 epochs once took 5 s, and ended before `gpuq gpus` answered).
    spec_file.write_text(yaml.safe_dump(job_spec(name="cli-demo", keras={"epochs": 30})))
    assert server.cli("submit", str(spec_file)) == "submitted job 1 (cli-demo): queued\n"

    listing = server.cli("ls")
    assert listing.splitlines()[0].split() == [
        "ID",
        "NAME",
        "KIND",
        "OWNER",
        "STATUS",
        "GPUS",
        "PROGRESS/REASON",
        "SUBMITTED",
    ]
    assert "cli-demo" in listing

    deadline = time.monotonic() + 90  # seen at once (no CLI start-up per look)
    while httpx.get(f"{server.url}/v1/jobs/1").json()["status"] != "running":
        assert time.monotonic() < deadline, "job 1 never ran"
        time.sleep(0.05)
    assert "in_use" in server.cli("gpus")

    # The service dies hard mid-training; the job's runner carries on, and a new service
    # re-adopts it and records the rest of its epochs.
    server.kill(signal.SIGKILL)
    server.start()
    job = server.wait(1, {"succeeded", "failed"})
    assert job["status"] == "succeeded", job
    epochs = httpx.get(f"{server.url}/v1/jobs/1/metrics").json()["epochs"]
    assert [e["epoch"] for e in epochs] == list(range(1, 31))

    shown = server.cli("show", "1")
    assert shown.startswith("job 1 (cli-demo) by anonymous: succeeded")
    assert re.search(r"^  GPUs: [01], 1 replica$", shown, re.MULTILINE), shown
    assert "progress: epoch 30/30 100%" in shown
    whole = server.cli("logs", "1")
    assert whole == httpx.get(f"{server.url}/v1/jobs/1/logs").text
    assert server.cli("logs", "1", "--tail", "2").splitlines() == whole.splitlines()[-2:]

    queued = json.loads(server.cli("submit", str(spec_file), "--json"))
    assert server.cli("cancel", str(queued["id"])) in (
        f"job {queued['id']} cancelled\n",
        f"job {queued['id']} is stopping (SIGTERM sent; SIGKILL after the grace period)\n",
    )


def test_follow_streams_the_log_while_the_job_runs_and_closes_at_the_end(server):
    # Epochs long enough (16,384 samples) that the job still runs when its first one is read.
    data = {"source": "synthetic", "samples": 16384, "features": 8}
    spec = job_spec(keras={"epochs": 6, "data": data})
    response = httpx.post(f"{server.url}/v1/jobs", json=spec)
    job_id = response.json()["id"]
    seen_while_running = None
    text = b""
    with httpx.stream(
        "GET", f"{server.url}/v1/jobs/{job_id}/logs", params={"follow": "true"}, timeout=120
    ) as stream:
        for chunk in stream.iter_bytes():
            text += chunk
            if seen_while_running is None and b"gpuq: epoch 1/6" in text:
                # Over HTTP, not `gpuq show`: a CLI's start-up on a loaded machine can
                # outlast the job's five other epochs.
                job = httpx.get(f"{server.url}/v1/jobs/{job_id}").json()
                seen_while_running = job["status"]
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


def test_hold_priority_release_dry_run_and_audit_through_the_cli(server, tmp_path):
    blocker, quick = tmp_path / "blocker.json", tmp_path / "quick.json"
    blocker.write_text(json.dumps(command_spec("import time; time.sleep(60)", gpus=2)))
    quick.write_text(json.dumps(command_spec("pass", gpus=2)))
    server.cli("submit", str(blocker))
    server.wait(1, {"starting", "running"})  # it holds both GPUs
    assert server.cli("submit", str(quick)) == "submitted job 2 (cmd): queued\n"

    assert server.cli("hold", "2") == "job 2 held: it will not start until `gpuq release 2`\n"
    assert server.job(2)["held"] is True
    assert server.cli("priority", "2", "-3") == "job 2 now has priority -3\n"
    assert server.job(2)["priority"] == -3
    preview = json.loads(server.cli("submit", str(quick), "--dry-run", "--json"))
    assert preview["would_start"] is False and preview["jobs_ahead"] == 0, "2 went behind"
    assert server.cli("submit", str(quick), "--dry-run").startswith("would wait: ")
    assert server.cli("release", "2") == "job 2 released: it may start again\n"
    assert server.job(2)["held"] is False
    assert len(json.loads(server.cli("ls", "--json"))["jobs"]) == 2, "dry runs queue nothing"

    entries = json.loads(server.cli("audit", "--json"))["entries"]
    assert [(e["action"], e["target"]) for e in entries[:4]] == [
        ("release", "job/2"),
        ("priority", "job/2"),
        ("hold", "job/2"),
        ("submit", "job/2"),
    ]
    server.cli("cancel", "1")
    assert server.wait(2, {"succeeded", "failed", "cancelled"})["status"] == "succeeded"


def test_the_token_comes_from_the_command_line_or_the_environment(server):
    token = json.loads(server.cli("users", "add", "ana", "--json"))["token"]
    denied = subprocess.run(
        [*GPUQ, "ls"], env=server.env, capture_output=True, text=True, timeout=60
    )
    assert denied.returncode == 1 and denied.stderr.startswith("gpuq: 401: "), denied.stderr
    assert server.cli("--token", token, "ls") == "no jobs\n"
    with_env = {**server.env, "GPUQ_TOKEN": token}
    done = subprocess.run([*GPUQ, "ls"], env=with_env, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "no jobs\n")
    elsewhere = f"http://127.0.0.1:{free_port()}"
    done = subprocess.run(
        [*GPUQ, "--url", elsewhere, "ls"], env=with_env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and f"cannot reach gpuq at {elsewhere}" in done.stderr


def test_serve_names_each_unknown_setting_with_the_nearest_known_one(tmp_path):
    server = Server(tmp_path / "gpuq")
    server.env.update(GPUQ_EXCUTOR="slurm", GPUQ_MAX_JOB_QUEUED="3")
    server.start()
    try:
        log = (tmp_path / "serve.log").read_text()
    finally:
        server.kill()
    assert "UNKNOWN SETTING GPUQ_EXCUTOR is ignored; did you mean GPUQ_EXECUTOR?" in log
    assert (
        "UNKNOWN SETTING GPUQ_MAX_JOB_QUEUED is ignored; did you mean GPUQ_MAX_JOBS_QUEUED?" in log
    )
    # The client's own variables, set for the CLI, are known.
    assert "GPUQ_URL" not in log


def run_in(folder: Path, server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    """`gpuq ARGS...` from `folder`, whatever its exit code."""
    return subprocess.run(
        [*server.gpuq, *args],
        env=server.env,
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )


TRAIN = """import argparse, os
from gpuq import report
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float)
lr = parser.parse_args().lr
bs = int(os.environ["GPUQ_PARAM_BS"])
print(f"training with lr={lr} bs={bs}", flush=True)
for epoch in range(1, 4):
    report(epoch, val_loss=abs(lr - 0.003) * 100 / epoch + bs / 1000)
"""


def test_gpuq_run_sweep_reads_argv_and_environment_and_shows_the_leaderboard(server, tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    sweep = ["--sweep", "lr=1e-3,1e-2", "--sweep", "bs=32,64", "--max-parallel", "2"]
    program = ["--", "python", "train.py", "--lr", "{lr}"]
    done = run_in(tmp_path, server, "run", *sweep, "--metric", "val_loss", *program)
    assert done.returncode == 0, done.stderr
    assert "gpuq: submitted sweep 1 (train.py): 4 members, jobs 1-4, 2 at a time" in done.stderr
    assert (
        "gpuq: job 1 (lr=0.001 bs=32) succeeded after 3 epochs: best val_loss 0.09867"
        in done.stderr
    )
    lines = done.stdout.splitlines()
    assert "best: job 1, val_loss 0.09867 with lr=0.001 bs=32" in lines[3]
    table = [
        line.split()
        for line in lines[lines.index(next(x for x in lines if x.startswith("RANK"))) :]
    ]
    assert table[0] == [
        "RANK",
        "JOB",
        "lr",
        "bs",
        "STATUS",
        "REASON",
        "EPOCHS",
        "BEST",
        "val_loss",
        "LAST",
    ]
    assert [row[:4] for row in table[1:]] == [
        ["1", "1", "0.001", "32"],
        ["2", "2", "0.001", "64"],
        ["3", "3", "0.01", "32"],
        ["4", "4", "0.01", "64"],
    ]
    log = server.cli("logs", "4")
    assert log == "training with lr=0.01 bs=64\n"
    assert (
        server.cli("sweep", "show", "1").splitlines()[0] == "sweep 1 (train.py) by anonymous: ended"
    )

    # A sweep from a file, listed, cancelled, and with --detach --json.
    spec = command_spec("import time; time.sleep(60)", gpus=1)
    (tmp_path / "sweep.yaml").write_text(
        yaml.safe_dump(
            {**spec, "name": "sleepy", "sweep": {"parameters": {"n": [1, 2, 3]}, "max_parallel": 1}}
        )
    )
    said = server.cli("sweep", "submit", str(tmp_path / "sweep.yaml"))
    assert said == "submitted sweep 2 (sleepy): 3 members, jobs 5-7, 1 at a time\n"
    listing = server.cli("sweep", "ls").splitlines()
    assert listing[0].split() == ["ID", "NAME", "OWNER", "STATUS", "SIZE", "MEMBERS", "METRIC"]
    assert listing[1].split()[:3] == ["2", "sleepy", "anonymous"]
    server.wait(5, {"running"})
    assert server.cli("sweep", "cancel", "2").startswith(
        "sweep 2 cancelling: 1 running, 2 cancelled"
    )
    server.wait(5, {"cancelled"})
    detached = run_in(tmp_path, server, "run", "-d", "--json", "--sweep", "x=1,2", "--", "true")
    assert detached.returncode == 0, detached.stderr
    assert json.loads(detached.stdout)["size"] == 2
