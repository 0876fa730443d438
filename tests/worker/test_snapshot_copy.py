"""A snapshot job's copy of its project: unpacked into `code/` as it was, links as links;
nothing lands outside `code/`, and a tar that tries is refused by name."""

import io
import tarfile
from pathlib import Path

import pytest

from gpuq.contract.rundir import RunDir
from worker.snapshot_copy import BadSnapshot, unpack


def tar_of(run: RunDir, members: list[tuple[str, bytes | str]]) -> None:
    """`snapshot.tar` in the run folder: (name, bytes) files, (name, "->target") links."""
    run.path.mkdir(parents=True, exist_ok=True)
    with tarfile.open(run.snapshot, "w") as tar:
        for name, body in members:
            info = tarfile.TarInfo(name)
            if isinstance(body, str):
                info.type, info.linkname = tarfile.SYMTYPE, body.removeprefix("->")
                tar.addfile(info)
            else:
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))


def test_the_project_is_unpacked_with_its_links_as_links_and_the_tar_removed(tmp_path: Path):
    run = RunDir(tmp_path / "run")
    tar_of(
        run,
        [
            ("train.py", b"print('v1')\n"),
            ("src/model.py", b"x = 1\n"),
            ("secrets", "->/etc/shadow"),  # stored as a link; never followed here
        ],
    )
    unpack(run)
    assert (run.code / "train.py").read_bytes() == b"print('v1')\n"
    assert (run.code / "src" / "model.py").read_text() == "x = 1\n"
    assert (run.code / "secrets").is_symlink()
    assert str((run.code / "secrets").readlink()) == "/etc/shadow"
    assert not run.snapshot.exists()
    unpack(run)  # once done, nothing to do (a job's other nodes)
    assert (run.code / "train.py").is_file()


@pytest.mark.parametrize(
    "members",
    [
        [("../escaped", b"x")],
        [("out", "->/tmp"), ("out/through-a-link", b"x")],
    ],
    ids=["dot-dot", "through-a-link"],
)
def test_a_member_that_would_land_outside_the_copy_is_refused(tmp_path: Path, members):
    run = RunDir(tmp_path / "run")
    tar_of(run, members)
    with pytest.raises(BadSnapshot, match="cannot unpack the job's snapshot"):
        unpack(run)
    assert not run.code.exists()
    assert not (tmp_path / "escaped").exists()
    assert not Path("/tmp/through-a-link").exists()


def test_an_absolute_name_lands_inside_the_copy(tmp_path: Path):
    run = RunDir(tmp_path / "run")
    tar_of(run, [("/tmp/absolute-escape", b"x")])
    unpack(run)
    assert (run.code / "tmp" / "absolute-escape").read_bytes() == b"x"
    assert not Path("/tmp/absolute-escape").exists()


def test_a_tar_that_is_not_one_is_refused(tmp_path: Path):
    run = RunDir(tmp_path / "run")
    run.path.mkdir(parents=True)
    run.snapshot.write_bytes(b"not a tar at all" * 100)
    with pytest.raises(BadSnapshot):
        unpack(run)
