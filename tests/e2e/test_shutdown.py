"""SIGTERM, as `systemctl stop` and `docker stop` send it, stops `gpuq serve` cleanly: it
closes the service (scheduler, launcher, login socket) and exits 0, while the jobs it
started go on and the next `gpuq serve` adopts them. Health checks, which containers ask
every 30 s, stay out of the access log."""

import json
import os
import signal
import time
from pathlib import Path

import httpx

from tests.e2e.server import Server
from tests.processes import gone


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def test_sigterm_closes_the_service_and_exits_0_but_leaves_jobs_running(tmp_path):
    server = Server(tmp_path / "gpuq")
    server.start()
    assert server.proc is not None
    socket = tmp_path / "gpuq" / "gpuq.sock"
    assert socket.exists()
    launchers = children(server.proc.pid)
    assert launchers, "gpuq serve started no launcher"
    spec = {"name": "outlives", "kind": "command", "command": {"argv": ["sleep", "4"]}}
    job_id = httpx.post(f"{server.url}/v1/jobs", json=spec).json()["id"]
    server.wait(job_id, {"running"})
    runner = json.loads((tmp_path / f"gpuq/runs/{job_id}/1/runner.json").read_text())

    for _ in range(3):  # as a container's HEALTHCHECK would
        assert httpx.get(f"{server.url}/healthz").status_code == 200
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=30) == 0
    log = (tmp_path / "serve.log").read_text()
    assert '"POST /v1/jobs HTTP/1.1" 201' in log and "GET /healthz" not in log, log
    assert not socket.exists()  # the service closed; uvicorn's re-raise did not kill it first
    deadline = time.monotonic() + 10
    while not all(gone(pid) for pid in launchers):
        assert time.monotonic() < deadline, "the launcher outlived gpuq serve"
        time.sleep(0.1)
    assert not gone(runner["runner_pid"]), "stopping gpuq serve ended a running job"

    server.start()
    assert server.wait(job_id, {"succeeded", "failed"}, timeout_s=60)["status"] == "succeeded"
    os.kill(server.proc.pid, signal.SIGTERM)
    assert server.proc.wait(timeout=30) == 0
