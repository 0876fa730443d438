"""`LocalExecutor` signals, as root, only runners gpuq itself knows: real processes."""

import json
import signal
import subprocess
import sys
import time

import pytest

from gpuq.contract.processes import process_start_ticks
from service.executors.local import LocalExecutor, is_runner_of
from tests.processes import gone


@pytest.fixture
def victim():
    """Someone else's process, leading a process group of its own (as a runner does)."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def executor(tmp_path):
    return LocalExecutor(tmp_path / "runs")


def gone_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def names_in_runner_json(executor, job_id, pid):
    """What a job's own processes can write: a `runner.json` naming any pid, with its
    real start time."""
    run = executor.run_dir(job_id, 1)
    run.create()
    record = {"runner_pid": pid, "runner_start_ticks": process_start_ticks(pid)}
    run.runner.write_text(json.dumps(record))
    return run


@pytest.mark.parametrize("recorded", ["gone", "none"])
def test_a_pid_named_in_runner_json_is_never_signalled(executor, victim, recorded):
    names_in_runner_json(executor, 7, victim.pid)
    # gpuq's record: the runner it started, long gone; or none (its start never committed).
    executor_job_id = str(gone_pid()) if recorded == "gone" else None

    assert executor.adopt(7, 1, executor_job_id) is False
    executor.signal(7, signal.SIGKILL)
    assert [e.job_id for e in executor.exited()] == [7]

    with pytest.raises(subprocess.TimeoutExpired):
        victim.wait(timeout=0.5)
    assert executor.job_sessions() == {}


def test_a_group_whose_leader_is_gone_is_never_signalled_for_a_job_naming_it(executor):
    """Attack B: no record of gpuq's (it stopped between a launch and its record), and
    `runner.json` names the id of root's process group whose leader has ended (`killpg`
    would still reach it). The job's real runner is found by its session and folder."""
    leader = subprocess.Popen(
        ["sh", "-c", "sleep 60 >/dev/null & echo $!"],
        start_new_session=True,
        stdout=subprocess.PIPE,
    )
    left = int(leader.stdout.readline())
    leader.wait()
    run = names_in_runner_json(executor, 9, left)
    (run.runner).write_text(json.dumps({"runner_pid": leader.pid}))
    real = subprocess.Popen(["sleep", "60"], cwd=run.path, start_new_session=True)
    try:
        assert executor.adopt(9, 1, None) is True  # the real runner, found
        assert executor.job_sessions() == {real.pid: 9}
        real.kill()  # and not reaped: nobody reaps an adopted runner but init, if even it
        while not gone(real.pid):
            time.sleep(0.01)
        assert [e.job_id for e in executor.exited()] == [9]
        assert not gone(left)  # root's sleep lives on
    finally:
        subprocess.run(["kill", "-9", str(left)], check=False)
        real.kill()
        real.wait()

    # With no runner to be found, nothing is signalled and the job is over.
    run = names_in_runner_json(executor, 10, leader.pid)
    assert executor.adopt(10, 1, None) is False
    assert executor.job_sessions() == {}
    assert [e.job_id for e in executor.exited()] == [10]


def test_a_runner_is_known_by_its_session_and_its_attempts_folder(executor, tmp_path):
    run = executor.run_dir(3, 1)
    run.create()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = "import time; time.sleep(60)"
    runner = subprocess.Popen([sys.executable, "-c", code], cwd=run.path, start_new_session=True)
    in_group = subprocess.Popen([sys.executable, "-c", code], cwd=run.path)
    other = subprocess.Popen([sys.executable, "-c", code], cwd=elsewhere, start_new_session=True)
    try:
        assert is_runner_of(runner.pid, run)
        assert not is_runner_of(in_group.pid, run)  # in the folder, but leads no session
        assert not is_runner_of(other.pid, run)  # leads a session, elsewhere

        # After a restart, gpuq's record of the runner's pid is believed: it is the runner.
        assert executor.adopt(3, 1, str(runner.pid)) is True
        executor.signal(3, signal.SIGTERM)
        assert runner.wait(timeout=10) == -signal.SIGTERM
    finally:
        for proc in (runner, in_group, other):
            proc.kill()
            proc.wait()
