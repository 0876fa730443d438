"""A session's runner (`worker.session`) started as gpuq starts a runner, its terminal
driven through `terminal.sock` as gpuq's relay drives it."""

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuq.contract import terminal
from gpuq.contract.device_plan import DevicePlan
from gpuq.contract.processes import RUNNER_MODULE
from gpuq.contract.rundir import RunDir, read_json
from gpuq.contract.runspec import RunSpec
from gpuq.contract.spec import JobSpec


@pytest.fixture
def session(tmp_path: Path) -> Iterator[tuple[RunDir, subprocess.Popen[bytes]]]:
    run = RunDir(tmp_path / "run")
    run.create()
    spec = JobSpec(
        kind="session", command={"argv": ["/bin/sh"], "env": {"PS1": "$ ", "TERM": "dumb"}}
    )
    run.spec.write_text(
        RunSpec(job_id=1, attempt=1, spec=spec, devices=DevicePlan.cpu()).model_dump_json()
    )
    runner = subprocess.Popen(
        [sys.executable, "-P", "-m", RUNNER_MODULE, str(run.path)],
        cwd=run.path,
        start_new_session=True,  # as the launcher forks it: leading a session of its own
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while not run.terminal.exists():
        assert runner.poll() is None and time.monotonic() < deadline, "no terminal.sock"
        time.sleep(0.01)
    yield run, runner
    if runner.poll() is None:
        os.killpg(runner.pid, 9)


def attach(run: RunDir) -> socket.socket:
    """Connects as gpuq's relay does; returns once the shell's first prompt is shown (what
    is typed before would be echoed before it)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(run.terminal))
    sock.sendall(terminal.size_frame(24, 132))
    type_and_read(sock, b"", b"$ ")
    return sock


def type_and_read(sock: socket.socket, keys: bytes, until: bytes) -> bytes:
    sock.sendall(terminal.frame(terminal.DATA, keys))
    reader, shown = terminal.FrameReader(), b""
    sock.settimeout(30)
    while until not in shown:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            raise AssertionError(f"never shown: {until!r}; shown: {shown!r}") from None
        assert data, shown
        shown += b"".join(payload for _, payload in reader.feed(data))
    return shown


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_program_gets_a_terminal_of_the_users_size_in_the_jobs_session(session):
    run, runner = session
    sock = attach(run)
    shown = type_and_read(sock, b"stty size; ps -o sid= -p $$; exit 3\n", b"exit 3\r\n")
    while data := sock.recv(65536):  # the runner closes its side once the session is over
        shown += data
    assert runner.wait(timeout=30) == 3
    assert b"24 132" in shown
    assert str(runner.pid).encode() in shown  # the shell is in the runner's session
    record = read_json(run.exit)
    assert record is not None
    assert (record["exit_code"], record["terminal_closed"]) == (3, False)
    assert b"24 132" in run.log.read_bytes()  # the terminal is kept in the job's log


def test_when_the_relay_goes_away_everything_the_session_started_ends(session):
    run, runner = session
    sock = attach(run)
    pids_file = run.path / "pids"
    keys = (
        b"sleep 300 & echo $! > pids; "  # a job of the shell, in a group of its own
        b"setsid sh -c 'echo $$ >> pids; exec sleep 301' & "  # one that left the session
        b"(trap '' HUP TERM; sleep 302) & echo $! >> pids; echo sta''rted\n"  # deaf to both
    )
    type_and_read(sock, keys, b"\nstarted\r\n")
    deadline = time.monotonic() + 10
    while len(pids := [int(p) for p in pids_file.read_text().split()]) < 3:
        assert time.monotonic() < deadline, pids  # the setsid one writes its own
        time.sleep(0.01)
    assert all(alive(p) for p in pids)
    sock.close()  # the user's terminal is gone
    assert runner.wait(timeout=30) == 128 + 1  # the shell's SIGHUP
    assert not [p for p in pids if alive(p)]
    record = read_json(run.exit)
    assert record is not None and record["terminal_closed"] is True
    assert not run.terminal.exists()


def test_a_second_connection_gets_nothing(session):
    run, runner = session
    first = attach(run)
    type_and_read(first, b"echo o''ne\n", b"\none\r\n")
    second = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with pytest.raises(OSError):  # the socket is gone once the first attached
        second.connect(str(run.terminal))
    first.sendall(terminal.frame(terminal.DATA, b"exit\n"))
    assert runner.wait(timeout=30) == 0
    assert json.loads(run.exit.read_text())["terminal_closed"] is False
