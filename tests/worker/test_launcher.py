"""`worker.launcher` through the service's `Launcher`: real forks, sessions and exits."""

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from gpuq.contract.device_plan import DevicePlan
from gpuq.contract.rundir import RunDir, read_json
from gpuq.contract.runspec import RunSpec
from gpuq.contract.spec import JobSpec
from service.executors.launcher import Launcher


def run_dir(tmp_path: Path, argv: list[str]) -> RunDir:
    """A run directory whose spec.json asks for `argv` as a command job on the CPU."""
    run = RunDir(tmp_path / "run")
    run.create()
    spec = JobSpec(kind="command", command={"argv": argv, "env": {"GREETING": "hi"}})
    runspec = RunSpec(job_id=1, attempt=1, spec=spec, devices=DevicePlan.cpu())
    run.spec.write_text(runspec.model_dump_json())
    return run


def wait_until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def exits():
    return threading.Event()


@pytest.fixture
def launcher(exits):
    launcher = Launcher(exits.set)
    launcher.start()
    yield launcher
    launcher.stop()


def test_a_forked_runner_leads_its_own_session_runs_the_job_and_its_exit_is_reported(
    tmp_path, launcher, exits
):
    run = run_dir(tmp_path, ["sh", "-c", 'echo "$GREETING from $(pwd)"; exit 3'])
    pid = launcher.spawn(run.path, {**os.environ, "PATH": os.environ["PATH"]})
    assert exits.wait(10), "the launcher never reported the runner's exit"
    assert read_json(run.exit)["exit_code"] == 3
    assert read_json(run.runner)["runner_pid"] == pid
    assert run.log.read_text().strip() == f"hi from {run.path}"
    events = [json.loads(line) for line in run.events.read_text().splitlines()]
    assert [e["event"] for e in events] == ["running"]


def test_runners_outlive_the_launcher(tmp_path, launcher):
    run = run_dir(tmp_path, ["sleep", "30"])
    pid = launcher.spawn(run.path, dict(os.environ))
    assert os.getsid(pid) == pid  # a session, hence a process group, of its own
    wait_until(lambda: read_json(run.runner) is not None)
    launcher.stop()  # what happens when `gpuq serve` stops
    try:
        time.sleep(0.2)
        os.kill(pid, 0)  # still there
        assert read_json(run.exit) is None
    finally:
        os.killpg(pid, signal.SIGKILL)


def test_a_launcher_that_died_is_started_again_on_the_next_spawn(tmp_path, launcher, exits):
    assert launcher._proc is not None
    launcher._proc.kill()
    launcher._proc.wait()
    run = run_dir(tmp_path, ["true"])
    launcher.spawn(run.path, dict(os.environ))
    assert exits.wait(10)
    assert read_json(run.exit)["exit_code"] == 0


def test_the_launcher_and_so_every_warm_process_start_without_gpuqs_secrets(monkeypatch):
    """A warm training process is the launcher's grandchild and, once it takes a job, its
    owner may read its first environment in /proc: it must hold nothing of root's."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "root's key")
    monkeypatch.setenv("TF_TOKEN_app_terraform_io", "root's token")
    monkeypatch.setenv("LC_TIME", "C.UTF-8")
    launcher = Launcher(lambda: None)
    launcher.start()
    try:
        assert launcher._proc is not None
        with open(f"/proc/{launcher._proc.pid}/environ", "rb") as f:
            names = {entry.split(b"=", 1)[0].decode() for entry in f.read().split(b"\0") if entry}
    finally:
        launcher.stop()
    assert "AWS_SECRET_ACCESS_KEY" not in names
    assert "TF_TOKEN_app_terraform_io" not in names
    assert {"LC_TIME", "PATH"} <= names
