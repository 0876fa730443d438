"""`gpuq serve` runs its scheduler in a process of its own (`service.scheduler_process`):
jobs go through it as before, it dies with gpuq serve however gpuq serve ends, and a
scheduler that died is seen (`/healthz`, the log) rather than silently missing."""

import os
import signal
import time
from pathlib import Path

import httpx

from tests.e2e.server import Server
from tests.processes import gone

TRUE = {"name": "true", "kind": "command", "command": {"argv": ["true"]}, "resources": {"gpus": 0}}


def scheduler_of(pid: int) -> int:
    """gpuq serve's child that schedules."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"service.scheduler_process" in argv:
            return int(entry.name)
    raise AssertionError(f"gpuq serve ({pid}) has no scheduler process")


def wait_gone(pid: int, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not gone(pid):
        assert time.monotonic() < deadline, f"process {pid} outlived gpuq serve"
        time.sleep(0.05)


def test_the_scheduler_runs_beside_the_api_and_dies_with_gpuq_serve(tmp_path):
    server = Server(tmp_path / "gpuq")
    server.start()
    assert server.proc is not None
    scheduler = scheduler_of(server.proc.pid)
    job = httpx.post(f"{server.url}/v1/jobs", json=TRUE).json()
    # A long poll answered by the scheduler's own commits, passed on to the API's process.
    ended = httpx.get(
        f"{server.url}/v1/jobs/{job['id']}", params={"wait_s": 30, "since": job["revision"]}
    ).json()
    while ended["status"] != "succeeded":
        assert ended["status"] in {"queued", "starting", "running"}, ended
        params = {"wait_s": 30, "since": ended["revision"]}
        ended = httpx.get(f"{server.url}/v1/jobs/{job['id']}", params=params).json()
    metrics = httpx.get(f"{server.url}/metrics").text  # the scheduler's own, asked of it
    assert "gpuq_queue_wait_seconds_count 1.0" in metrics
    assert "gpuq_scheduler_loop_duration_seconds_count" in metrics

    server.proc.send_signal(signal.SIGKILL)  # no chance to stop it: the kernel does
    server.proc.wait(timeout=10)
    wait_gone(scheduler)
    server.start()  # the scheduler lock went with it
    again = httpx.post(f"{server.url}/v1/jobs", json=TRUE).json()
    assert server.wait(again["id"], {"succeeded", "failed"})["status"] == "succeeded"
    server.kill()


def test_a_scheduler_process_that_died_fails_the_health_check(tmp_path):
    server = Server(tmp_path / "gpuq")
    server.start()
    assert server.proc is not None
    scheduler = scheduler_of(server.proc.pid)
    signal_sent = time.monotonic()
    os.kill(scheduler, signal.SIGKILL)
    while (health := httpx.get(f"{server.url}/healthz")).status_code == 200:
        assert time.monotonic() - signal_sent < 10, "healthz never saw the scheduler die"
        time.sleep(0.05)
    assert health.status_code == 503
    assert health.json()["status"] == "scheduler stopped"
    server.kill()
    log = (tmp_path / "serve.log").read_text()
    assert "the scheduler's process ended; jobs are stored but none start" in log
