"""The size limit: refused before anything is sent, naming the largest files and how to
leave them out."""

from pathlib import Path

import pytest

from gpuq.snapshots import SnapshotTooLarge, check_size, collect
from gpuq.snapshots.limits import size_text

MIB = 2**20


def sized(folder: Path, sizes: dict[str, int]) -> None:
    """Sparse files of the given sizes: what the limit counts, without writing them."""
    for name, size in sizes.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as file:
            file.truncate(size)


def test_over_the_limit_names_the_five_largest_files_and_how_to_leave_them_out(repo: Path):
    sized(
        repo,
        {
            "models/big.ckpt": 812 * MIB,
            "data/train.npy": 40 * MIB,
            "data/val.npy": 5 * MIB + MIB // 2,
            "a.bin": 3 * MIB,
            "b.bin": 2 * MIB,
            "c.bin": 1 * MIB,
        },
    )
    project = collect(repo, outside_git=False)
    assert project is not None
    with pytest.raises(SnapshotTooLarge) as raised:
        check_size(project, 100)
    message = str(raised.value)
    lines = message.splitlines()
    assert "over the limit of 100 MiB (GPUQ_SNAPSHOT_MAX_MB)" in lines[0]
    assert lines[1:6] == [
        "  models/big.ckpt 812 MiB",
        "  data/train.npy 40 MiB",
        "  data/val.npy 5.5 MiB",
        "  a.bin 3.0 MiB",
        "  b.bin 2.0 MiB",
    ]
    assert "c.bin" not in message
    assert lines[-1] == (
        "To leave them out, add them to .gpuqignore (or .gitignore), or run with --no-snapshot."
    )
    assert raised.value.total == project.total_size
    assert raised.value.largest[0] == ("models/big.ckpt", 812 * MIB)


def test_up_to_the_limit_passes(repo: Path):
    project = collect(repo, outside_git=False)
    assert project is not None
    check_size(project, project.total_size / MIB)
    with pytest.raises(SnapshotTooLarge):
        check_size(project, (project.total_size - 1) / MIB)


def test_sizes_read_as_a_person_would():
    assert [size_text(n) for n in (95 * 1024, 3 * MIB + MIB // 2, 812 * MIB)] == [
        "95 KiB",
        "3.5 MiB",
        "812 MiB",
    ]
