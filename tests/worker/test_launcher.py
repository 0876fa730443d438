"""`worker.launcher` through the service's `Launcher`: real forks, sessions and exits."""

import json
import os
import shutil
import signal
import stat
import threading
import time
from pathlib import Path

import pytest

from gpuq.contract.device_plan import DevicePlan
from gpuq.contract.rundir import HOOK_FOLDER, RunDir, read_json
from gpuq.contract.runspec import RunSpec
from gpuq.contract.spec import JobSpec
from service.executors.launcher import Launcher
from worker.launch_plan import HOOK, PACKAGE
from worker.runner import HEARTBEAT_S


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


def test_the_runner_beats_every_two_seconds_while_its_job_runs(tmp_path, launcher):
    quick, slow = (
        run_dir(tmp_path / "quick", ["true"]),
        run_dir(tmp_path / "slow", ["sleep", "2.5"]),
    )
    began = time.time()
    for run in (quick, slow):
        launcher.spawn(run.path, dict(os.environ))
    wait_until(lambda: read_json(slow.exit) is not None)
    assert read_json(quick.exit)["exit_code"] == 0
    assert not quick.heartbeat.exists()  # it ended before its first beat
    assert slow.heartbeat.stat().st_mtime >= began + HEARTBEAT_S


def test_runners_share_the_start_up_hooks_folder_that_the_launcher_keeps(tmp_path, exits):
    """A command job's PYTHONPATH starts with the hook's folder the launcher made (once,
    gpuq's own and read-only to jobs), not with one made in each run directory; one
    removed is made again for the next job."""
    hooks = tmp_path / "runs" / HOOK_FOLDER
    hooks.parent.mkdir()
    launcher = Launcher(exits.set, hook_dir=hooks)
    launcher.start()
    try:
        seen = []
        for name in ("first", "second", "after-removal"):
            if name == "after-removal":
                shutil.rmtree(hooks)
            run = run_dir(tmp_path / name, ["sh", "-c", 'echo "${PYTHONPATH%%:*}"'])
            launcher.spawn(run.path, dict(os.environ))
            wait_until(lambda run=run: read_json(run.exit) is not None)
            assert not (run.path / "pythonpath").exists()
            seen.append(Path(run.log.read_text().strip()))
    finally:
        launcher.stop()
    assert seen[0] == seen[1] == seen[2]
    assert seen[0].parent == hooks
    assert (seen[0] / "sitecustomize.py").read_bytes() == HOOK.read_bytes()
    assert (seen[0] / "gpuq").resolve() == PACKAGE.resolve()
    for folder in (hooks, seen[0]):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    assert [p.name for p in hooks.iterdir()] == [seen[0].name]  # no partial copy left


def test_a_runner_makes_its_own_hook_folder_when_the_launcher_cannot(tmp_path, exits, caplog):
    (tmp_path / "runs").write_text("a file where the runs folder should be")
    launcher = Launcher(exits.set, hook_dir=tmp_path / "runs" / HOOK_FOLDER)
    launcher.start()
    try:
        run = run_dir(tmp_path, ["sh", "-c", 'echo "${PYTHONPATH%%:*}"'])
        launcher.spawn(run.path, dict(os.environ))
        wait_until(lambda: read_json(run.exit) is not None)
        wait_until(lambda: "could not make the start-up hook's folder" in caplog.text)
    finally:
        launcher.stop()
    assert Path(run.log.read_text().strip()) == run.path / "pythonpath"
    assert (run.path / "pythonpath" / "sitecustomize.py").read_bytes() == HOOK.read_bytes()


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(child) for child in f.read().split()]


def state_of(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def spare_of(launcher: Launcher) -> int:
    """The runner the launcher keeps forked ahead of the next job."""
    assert launcher._proc is not None
    pid = launcher._proc.pid
    wait_until(lambda: len(children(pid)) == 1)
    return children(pid)[0]


def test_a_job_starts_on_the_spare_runner_forked_ahead_of_it(tmp_path, launcher, exits):
    spare = spare_of(launcher)
    wait_until(lambda: len(os.listdir(f"/proc/{spare}/fd")) == 4)  # ready
    assert os.getsid(spare) == spare  # a session of its own already
    # Nothing of the launcher's but its end of the spare's pipe (and stderr).
    held = {int(fd) for fd in os.listdir(f"/proc/{spare}/fd")}
    assert held == {0, 1, 2, max(held)}
    assert os.readlink(f"/proc/{spare}/fd/{max(held)}").startswith("pipe:")
    assert os.readlink(f"/proc/{spare}/fd/0") == os.readlink(f"/proc/{spare}/fd/1") == os.devnull
    run = run_dir(tmp_path, ["sh", "-c", 'echo "$GREETING"'])
    assert launcher.spawn(run.path, dict(os.environ)) == spare
    assert exits.wait(10)
    assert read_json(run.exit)["exit_code"] == 0
    assert run.log.read_text() == "hi\n"
    assert spare_of(launcher) != spare  # the next one


def test_a_spare_runner_that_died_is_passed_over(tmp_path, launcher, exits):
    spare = spare_of(launcher)
    os.kill(spare, signal.SIGKILL)
    wait_until(lambda: state_of(spare) == "Z")  # dead, not reaped yet
    run = run_dir(tmp_path, ["true"])
    launcher.spawn(run.path, dict(os.environ))
    assert exits.wait(10)
    assert read_json(run.exit)["exit_code"] == 0


def test_spare_runners_end_with_the_launcher(launcher):
    spare = spare_of(launcher)
    launcher.stop()
    wait_until(lambda: not os.path.exists(f"/proc/{spare}"))


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
