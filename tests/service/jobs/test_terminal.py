"""gpuq believes a session's `terminal.sock`, in a folder its owner can write, only when
the kernel says its runner listens there; a browser's window messages are sizes or nothing."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gpuq.contract.rundir import RunDir
from service.errors import Unavailable
from service.jobs.terminal import _window, connect_to_runner


def listen(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen(1)
    return sock


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    # Deep enough that the socket's whole path passes the kernel's 108 bytes.
    run = RunDir(tmp_path / ("x" * 60) / ("y" * 60) / "runs" / "7" / "1")
    run.path.mkdir(parents=True)
    return run


def test_the_runners_own_socket_is_reached_even_past_108_bytes(run: RunDir):
    assert len(str(run.terminal)) > 108
    cwd = os.getcwd()
    os.chdir(run.path)  # bound by name, as the runner binds it
    try:
        listener = listen(Path(run.terminal.name))
    finally:
        os.chdir(cwd)
    with listener, connect_to_runner(run, os.getpid()) as sock:
        assert sock.fileno() >= 0


def test_a_link_to_another_sessions_socket_is_never_connected_to(run: RunDir, tmp_path: Path):
    """Attack C: a member links her `terminal.sock` to another member's; the relay's
    connection would be that session's one attach, and end it. The link is refused
    before anything connects."""
    with listen(tmp_path / "other.sock") as other:
        run.terminal.symlink_to(tmp_path / "other.sock")
        with pytest.raises(Unavailable, match="cannot be reached"):
            connect_to_runner(run, runner_pid=os.getpid())
        other.setblocking(False)
        with pytest.raises(BlockingIOError):
            other.accept()


def test_a_socket_of_another_process_is_refused(run: RunDir):
    # Bound in the folder by another process than the runner gpuq recorded.
    cwd = os.getcwd()
    os.chdir(run.path)
    try:
        bound = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import socket, time; s = socket.socket(socket.AF_UNIX); "
                f"s.bind({run.terminal.name!r}); s.listen(1); print(flush=True); time.sleep(60)",
            ],
            stdout=subprocess.PIPE,
        )
    finally:
        os.chdir(cwd)
    try:
        assert bound.stdout is not None
        bound.stdout.readline()
        with pytest.raises(Unavailable, match="not its runner's"):
            connect_to_runner(run, runner_pid=os.getpid())
    finally:
        bound.kill()
        bound.wait()


def test_no_socket_is_unavailable_not_an_error(run: RunDir):
    with pytest.raises(Unavailable, match="cannot be reached"):
        connect_to_runner(run, os.getpid())


NO_SIZES = ['{"rows": Infinity, "cols": 80}', '{"rows": NaN, "cols": 80}', '{"rows": 24}']
NO_SIZES += ["[24, 80]", '{"rows": "x", "cols": 80}', "24x80", '{"rows": [], "cols": 80}']


@pytest.mark.parametrize("text", NO_SIZES)
def test_a_window_message_that_is_no_size_is_ignored(text: str):
    assert _window(text) is None


def test_a_window_message_gives_rows_and_columns():
    assert _window('{"rows": 24, "cols": 80.0}') == (24, 80)
