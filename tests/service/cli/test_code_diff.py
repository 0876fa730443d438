"""`gpuq diff`'s comparisons: files added, removed and changed between two snapshots (links
as their targets, binary files named, not shown), and the spec's fields that differ."""

import io
import tarfile
from pathlib import Path

from service.cli.code_diff import compare_files, compare_specs, files_of


def tar_at(path: Path, members: dict[str, bytes | str]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            if isinstance(body, str):
                info.type, info.linkname = tarfile.SYMTYPE, body
                tar.addfile(info)
            else:
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))
    return path


def test_files_added_removed_and_changed_with_a_unified_diff(tmp_path: Path):
    first = files_of(
        tar_at(
            tmp_path / "a.tar",
            {"train.py": b"lr = 0.1\nepochs = 3\n", "old.py": b"x\n", "data": "/srv/d1",
             "w.bin": b"\0\1"},
        )
    )  # fmt: skip
    second = files_of(
        tar_at(
            tmp_path / "b.tar",
            {"train.py": b"lr = 0.01\nepochs = 3\n", "new.py": b"y\n", "data": "/srv/d2",
             "w.bin": b"\0\2"},
        )
    )  # fmt: skip
    changes = compare_files(first, second)
    assert (changes.added, changes.removed, changes.changed) == (
        ["new.py"],
        ["old.py"],
        ["data", "train.py", "w.bin"],
    )
    text = "".join(changes.text)
    assert "--- a/train.py\n+++ b/train.py\n" in text
    assert "-lr = 0.1\n+lr = 0.01\n" in text
    assert "--- a/data\n+++ b/data\n" in text and "-> /srv/d2" in text
    assert "Binary files a/w.bin and b/w.bin differ\n" in text
    assert "--- /dev/null\n+++ b/new.py\n" in text and "+y\n" in text
    assert "--- a/old.py\n+++ /dev/null\n" in text
    assert compare_files(first, first).changed == []


def test_spec_fields_that_differ_by_their_dotted_names():
    a = {"resources": {"gpus": 1, "memory_mb": 4096}, "name": "t", "command": {"env": {}}}
    b = {"resources": {"gpus": 2, "memory_mb": 4096}, "name": "t", "time_limit_s": 60}
    assert compare_specs(a, b) == [
        ("command.env", {}, None),
        ("resources.gpus", 1, 2),
        ("time_limit_s", None, 60),
    ]
