"""The one door into a job's folders: nothing but what was asked is ever opened.

Each test runs with the kernel's `openat2` and with the walk one component at a time that
stands in where the kernel (or a seccomp filter) lacks it.
"""

import os
import pty
import socket
import stat
import subprocess
import sys

import pytest

from gpuq.contract import job_files


@pytest.fixture(params=["openat2", "walk"], autouse=True)
def door(request, monkeypatch):
    monkeypatch.setattr(job_files, "_has_openat2", request.param == "openat2")
    return request.param


@pytest.fixture
def folder(tmp_path):
    folder = tmp_path / "run"
    (folder / "artifacts" / "deep").mkdir(parents=True)
    (folder / "output.log").write_bytes(b"log\n")
    (folder / "artifacts" / "deep" / "model.keras").write_bytes(b"model")
    (tmp_path / "secret").write_text("root's")
    return folder


def test_a_regular_file_is_read_and_appended_to(folder):
    with job_files.open_file(folder, "output.log") as f:
        assert f.read() == b"log\n"
    with job_files.open_file(folder, "output.log", append=True) as f:
        f.write(b"more\n")
    assert (folder / "output.log").read_bytes() == b"log\nmore\n"
    with job_files.open_file(folder, "artifacts/deep/model.keras") as f:
        assert f.read() == b"model"


@pytest.mark.parametrize(
    "name", ["../secret", "/etc/passwd", "a/../output.log", "./output.log", ""]
)
def test_a_name_that_could_leave_is_refused(folder, name):
    with pytest.raises(PermissionError):
        job_files.open_file(folder, name)


def test_a_link_at_the_end_or_on_the_way_is_never_followed(folder, tmp_path):
    (folder / "exit.json").symlink_to(tmp_path / "secret")
    (folder / "inward").symlink_to(folder / "output.log")  # even one that stays inside
    (folder / "out").symlink_to(tmp_path, target_is_directory=True)
    (folder / "in").symlink_to(folder / "artifacts", target_is_directory=True)
    for name in ("exit.json", "inward"):
        with pytest.raises(PermissionError):
            job_files.open_file(folder, name)
        assert stat.S_ISLNK(job_files.lstat(folder, name).st_mode)
    for name in ("out/secret", "in/deep/model.keras"):
        with pytest.raises(OSError):
            job_files.open_file(folder, name)
        assert not job_files.exists(folder, name)


def test_the_folder_itself_must_not_be_a_link(folder, tmp_path):
    (tmp_path / "alias").symlink_to(folder, target_is_directory=True)
    with pytest.raises(OSError):
        job_files.open_file(tmp_path / "alias", "output.log")


def test_a_fifo_is_refused_at_once_without_being_opened(folder):
    os.mkfifo(folder / "events.jsonl")
    with pytest.raises(PermissionError):
        job_files.open_file(folder, "events.jsonl")  # would block (or wake a writer) if opened


def test_missing_is_file_not_found(folder):
    with pytest.raises(FileNotFoundError):
        job_files.open_file(folder, "exit.json")
    assert not job_files.exists(folder, "exit.json")


#: Run in a process of its own that leads a session with no terminal, as `gpuq serve` does
#: under systemd: a terminal it opened without O_NOCTTY would become its controlling one.
NO_CONTROLLING_TERMINAL = """
import os, sys
from pathlib import Path
from gpuq.contract import job_files
job_files._has_openat2 = sys.argv[3] == "openat2"
os.setsid()
try:
    job_files.open_file(Path(sys.argv[1]), sys.argv[2])
    print("opened")
except PermissionError:
    print("refused")
try:
    os.open("/dev/tty", os.O_RDONLY)
    print("has a terminal")
except OSError:
    print("no terminal")
"""


def test_a_terminal_behind_a_name_never_becomes_gpuqs(folder, door):
    master, slave = pty.openpty()
    try:
        where = os.ttyname(slave)
        (folder / "output.log").unlink()
        (folder / "output.log").symlink_to("/dev/./././" + where.removeprefix("/dev/"))
        said = subprocess.run(
            [sys.executable, "-c", NO_CONTROLLING_TERMINAL, str(folder), "output.log", door],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.split("\n")
        assert said[:2] == ["refused", "no terminal"]
    finally:
        os.close(master)
        os.close(slave)


def test_the_listing_has_regular_files_only_reached_without_links(folder, tmp_path):
    (folder / "artifacts" / "escape").symlink_to(tmp_path / "secret")
    (folder / "artifacts" / "loop").symlink_to(folder / "artifacts", target_is_directory=True)
    os.mkfifo(folder / "artifacts" / "pipe")
    names = [name for name, _ in job_files.regular_files(folder, "artifacts")]
    assert names == ["deep/model.keras"]
    assert job_files.regular_files(folder, "missing") == []
    (folder / "tensorboard").symlink_to(tmp_path, target_is_directory=True)
    assert job_files.regular_files(folder, "tensorboard") == []


def test_a_socket_is_connected_to_only_through_no_link(folder, tmp_path):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    elsewhere = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(folder / "terminal.sock"))
    elsewhere.bind(str(tmp_path / "other.sock"))
    listener.listen(1)
    elsewhere.listen(1)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        job_files.connect(folder, "terminal.sock", sock)
        listener.accept()[0].close()
    (folder / "terminal.sock").unlink()
    (folder / "terminal.sock").symlink_to(tmp_path / "other.sock")
    with socket.socket(socket.AF_UNIX) as sock, pytest.raises(PermissionError):
        job_files.connect(folder, "terminal.sock", sock)
    with socket.socket(socket.AF_UNIX) as sock, pytest.raises(PermissionError):
        job_files.connect(folder, "output.log", sock)  # a file is not a socket
    elsewhere.setblocking(False)
    with pytest.raises(BlockingIOError):
        elsewhere.accept()  # the other socket was never reached
    listener.close()
    elsewhere.close()


def test_data_is_found_through_links_but_only_a_regular_file_inside_the_roots_is_opened(
    folder, tmp_path
):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.csv").write_text("a,y\n")
    (tmp_path / "via").symlink_to(data, target_is_directory=True)
    with job_files.open_regular(tmp_path / "via" / "train.csv", data) as f:
        assert f.read() == b"a,y\n"
    (data / "out").symlink_to(tmp_path / "secret")
    os.mkfifo(data / "pipe")
    for name in ("out", "pipe"):
        with pytest.raises(PermissionError):
            job_files.open_regular(data / name, data)
    with job_files.open_regular(tmp_path / "secret") as f:  # no roots: anywhere
        assert f.read() == b"root's"
