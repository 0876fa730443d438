"""The snapshot's tar: what it unpacks to, links as links, the same bytes for the same
tree, and no tar passed off as whole when a file changes while it is read."""

import hashlib
import io
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from gpuq.snapshots import (
    Project,
    SnapshotChanged,
    SnapshotError,
    collect,
    snapshot_to_file,
    write_tar,
)
from gpuq.snapshots.tarball import CHUNK
from tests.gpuq.snapshots.repos import write


def project_of(folder: Path) -> Project:
    project = collect(folder, outside_git=True)
    assert project is not None
    return project


def tar_bytes(folder: Path) -> bytes:
    out = io.BytesIO()
    write_tar(project_of(folder), out)
    return out.getvalue()


def sha_of(folder: Path) -> str:
    return write_tar(project_of(folder), io.BytesIO()).sha256


def test_the_tar_unpacks_to_the_files_and_its_hash_is_of_its_bytes(repo: Path, tmp_path: Path):
    long_name = "/".join(["a-rather-long-folder-name"] * 5) + "/module.py"
    write(repo, {long_name: "deep", "données/é.py": "unicode"})
    os.symlink("../train.py", repo / "src" / "train-link.py")
    project = project_of(repo)
    snapshot, path = snapshot_to_file(project, tmp_path)
    data = path.read_bytes()
    assert (snapshot.sha256, snapshot.size) == (hashlib.sha256(data).hexdigest(), len(data))
    assert snapshot.files == len(project.files)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    with tarfile.open(path) as tar:
        members = tar.getmembers()
        tar.extractall(tmp_path / "out", filter="tar")
    assert [m.name for m in members] == list(project.files)  # sorted, no folders
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
    for name in project.files:
        source, unpacked = repo / name, tmp_path / "out" / name
        if source.is_symlink():
            assert os.readlink(unpacked) == os.readlink(source)
        else:
            assert unpacked.read_bytes() == source.read_bytes()


def test_a_link_out_of_the_project_is_a_link_member_never_its_targets_content(repo: Path):
    os.symlink("/etc/passwd", repo / "passwd")
    os.symlink("/etc", repo / "etc")
    data = tar_bytes(repo)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        links = {m.name: (m.type, m.linkname) for m in tar.getmembers() if m.issym()}
        names = tar.getnames()
    assert links == {"passwd": (tarfile.SYMTYPE, "/etc/passwd"), "etc": (tarfile.SYMTYPE, "/etc")}
    assert not [name for name in names if name.startswith("etc/")]
    first_line = Path("/etc/passwd").read_bytes().splitlines()[0]
    assert first_line not in data


def test_the_same_tree_gives_the_same_sha256_whatever_its_times(repo: Path):
    first = sha_of(repo)
    assert sha_of(repo) == first
    os.utime(repo / "train.py", (1, 1))
    os.utime(repo / "src" / "models", (2, 2))
    assert sha_of(repo) == first


def test_an_edited_byte_gives_another_sha256(repo: Path):
    first = sha_of(repo)
    path = repo / "src" / "models" / "net.py"
    path.write_text(path.read_text().replace("3", "4"))
    assert sha_of(repo) != first


def test_modes_are_kept_only_as_executable_or_not(repo: Path):
    script = repo / "train.py"
    script.chmod(0o600)
    first = sha_of(repo)
    script.chmod(0o640)
    assert sha_of(repo) == first
    script.chmod(0o700)
    executable = sha_of(repo)
    assert executable != first
    script.chmod(0o751)
    assert sha_of(repo) == executable
    with tarfile.open(fileobj=io.BytesIO(tar_bytes(repo))) as tar:
        assert tar.getmember("train.py").mode == 0o755
        assert tar.getmember("README.md").mode == 0o644


def test_a_file_gone_before_it_is_read_fails_naming_it_and_leaves_no_file(
    repo: Path, tmp_path: Path
):
    project = project_of(repo)
    (repo / "README.md").unlink()
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(SnapshotChanged, match=r"^README\.md disappeared .* run again"):
        snapshot_to_file(project, out)
    assert list(out.iterdir()) == []


class Meddling(io.BytesIO):
    """A tar's destination that changes a source file once the first chunk of it has been
    written: as an editor saving it mid-read would."""

    def __init__(self, source: Path, change: str):
        super().__init__()
        self.source, self.change = source, change

    def write(self, data: Any, /) -> int:
        if len(data) == CHUNK and self.change:
            with self.source.open("ab" if self.change == "grow" else "r+b") as file:
                if self.change == "grow":
                    file.write(b"more")
                else:
                    file.truncate(CHUNK)
            self.change = ""
        return super().write(data)


@pytest.mark.parametrize(("change", "why"), [("grow", "changed"), ("shrink", "shrank")])
def test_a_file_changed_while_read_fails_naming_it(repo: Path, change: str, why: str):
    big = repo / "weights.bin"
    big.write_bytes(os.urandom(3 * CHUNK))
    project = project_of(repo)
    with pytest.raises(SnapshotChanged, match=rf"^weights\.bin {why} while") as raised:
        write_tar(project, Meddling(big, change))
    assert raised.value.name == "weights.bin"


class Full(io.BytesIO):
    """A destination with no room left."""

    def write(self, data: Any, /) -> int:
        raise OSError(28, "No space left on device")


def test_no_room_to_write_is_told_apart_from_a_file_that_cannot_be_read(repo: Path):
    with pytest.raises(SnapshotError, match=r"^cannot write the snapshot: No space left"):
        write_tar(project_of(repo), Full())
