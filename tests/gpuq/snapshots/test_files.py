"""Which files a snapshot holds: git's view of the work tree as it is on disk, less
`.gpuqignore`; outside git only when asked; links kept as links; no FIFO, socket or
submodule content."""

import os
import socket
from pathlib import Path, PurePosixPath

import pytest

from gpuq.snapshots import collect
from tests.gpuq.snapshots.repos import git, make_repo, write


def test_tracked_modified_and_untracked_files_are_in_and_ignored_ones_out(repo: Path):
    (repo / "train.py").write_text("print('edited after the commit')\n")
    write(repo, {"notes.txt": "new", "run.log": "ignored", "build/out.bin": "ignored too"})
    project = collect(repo, outside_git=False)
    assert project is not None and project.in_git
    assert project.files == (
        ".gitignore", "README.md", "notes.txt", "src/models/net.py", "train.py",
    )  # fmt: skip
    sizes = dict(zip(project.files, project.sizes, strict=True))
    assert sizes["train.py"] == len("print('edited after the commit')\n")
    assert project.total_size == sum(project.sizes)
    assert project.skipped == ()


def test_gpuqignore_leaves_out_more_as_gitignore_would(repo: Path):
    write(
        repo,
        {
            ".gpuqignore": "data/\n!data/keep.txt\n*.ckpt\n!best.ckpt\n/top.txt\nruns/*\n"
            "!runs/chosen\n",
            "data/keep.txt": "in an excluded folder: stays out, as in git",
            "data/x.csv": "1,2",
            "models/last.ckpt": "weights",
            "models/best.ckpt": "weights",
            "top.txt": "anchored",
            "src/top.txt": "not anchored here",
            "runs/a": "out",
            "runs/chosen": "back in",
        },
    )
    git(repo, "add", "data/x.csv")  # tracked or not, .gpuqignore leaves it out
    project = collect(repo, outside_git=False)
    assert project is not None
    assert set(project.files) == {
        ".gitignore", ".gpuqignore", "README.md", "models/best.ckpt", "runs/chosen",
        "src/models/net.py", "src/top.txt", "train.py",
    }  # fmt: skip


def test_a_file_deleted_but_not_committed_is_left_out(repo: Path):
    (repo / "README.md").unlink()
    project = collect(repo, outside_git=False)
    assert project is not None
    assert "README.md" not in project.files


def test_the_working_folder_is_relative_to_the_work_trees_top(repo: Path):
    project = collect(repo / "src" / "models", outside_git=False)
    assert project is not None
    assert (project.root, project.workdir) == (repo.resolve(), PurePosixPath("src/models"))
    at_top = collect(repo, outside_git=False)
    assert at_top is not None and at_top.workdir == PurePosixPath(".")


def test_outside_git_nothing_unless_asked_then_the_whole_folder(tmp_path: Path):
    folder = tmp_path / "plain"
    write(
        folder,
        {
            "train.py": "x",
            "lib/util.py": "y",
            "lib/cache/blob": "z",
            "vendor/dep/.git/config": "a nested repository's own",
            "vendor/dep/code.py": "w",
            ".gpuqignore": "lib/cache/\n",
        },
    )
    assert collect(folder, outside_git=False) is None
    project = collect(folder / "lib", outside_git=True)
    assert project is not None and not project.in_git
    assert project.root == folder.resolve() / "lib"
    assert project.files == ("cache/blob", "util.py")  # the folder asked for is the root
    whole = collect(folder, outside_git=True)
    assert whole is not None and whole.workdir == PurePosixPath(".")
    assert whole.files == (".gpuqignore", "lib/util.py", "train.py", "vendor/dep/code.py")


def test_without_a_git_binary_a_repository_is_outside_git(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    empty = tmp_path / "no-programs"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert collect(repo, outside_git=False) is None
    project = collect(repo, outside_git=True)
    assert project is not None and not project.in_git
    assert not any(name.startswith(".git/") for name in project.files)
    assert "train.py" in project.files


def test_links_are_kept_as_links_wherever_they_point_and_never_walked(repo: Path):
    os.symlink("/etc/passwd", repo / "passwd")
    os.symlink("/etc", repo / "etc")
    os.symlink("src", repo / "code")
    for project in (collect(repo, outside_git=False), collect(repo, outside_git=True)):
        assert project is not None
        sizes = dict(zip(project.files, project.sizes, strict=True))
        assert (sizes["passwd"], sizes["etc"], sizes["code"]) == (11, 4, 3)
        assert not [name for name in project.files if name.startswith(("etc/", "code/"))]


def test_fifos_sockets_and_a_file_become_a_fifo_are_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    folder = tmp_path / "plain"
    write(folder, {"train.py": "x"})
    os.mkfifo(folder / "pipe")
    monkeypatch.chdir(folder)  # a socket's path must be short: bound relative to here
    with socket.socket(socket.AF_UNIX) as server:
        server.bind("sock")
        project = collect(folder, outside_git=True)
    assert project is not None
    assert (project.files, project.skipped) == (("train.py",), ("pipe", "sock"))
    repo = make_repo(tmp_path / "repo", {"a.py": "", "fifo": ""})
    (repo / "fifo").unlink()
    os.mkfifo(repo / "fifo")
    in_git = collect(repo, outside_git=False)
    assert in_git is not None
    assert (in_git.files, in_git.skipped) == (("a.py",), ("fifo",))


def test_a_submodule_and_a_nested_repository_are_named_not_entered(repo: Path, tmp_path: Path):
    other = make_repo(tmp_path / "other", {"lib.py": "shared"})
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(other), "sub")
    make_repo(repo / "nested", {"inner.py": "its own repository"})
    project = collect(repo, outside_git=False)
    assert project is not None
    assert set(project.skipped) == {"sub", "nested"}
    assert ".gitmodules" in project.files
    assert not [name for name in project.files if name.startswith(("sub/", "nested/"))]
