"""Snapshots at submit (issue 51): what `gpuq run` adds to a submission, and unpacking to a
job's start, for a project of 2,000 files / 50 MB.

The project is a real git repository, made once: files of mixed sizes (most a few KiB as
code is, a few MiB as small data and weights are; seeded), committed, then some edited and
some added untracked, plus ignored run outputs that must stay out. Timed, each as the median
of `--repeats` runs on the unchanged tree:

- `collect` (git ls-files, .gpuqignore, an lstat per file) and `snapshot_to_file` (the tar
  written to a temporary file and hashed in the same pass), apart and together: the
  snapshot; every run must give the same sha256, which is what lets the CLI skip the upload;
- `provenance` (git rev-parse, symbolic-ref, status, diff), also part of a submission;
- unpacking the tar with tarfile (`filter="tar"`, as `worker.snapshot_copy` does) into a
  fresh folder: what a job's start waits for; in turns with it, as many empty files made
  there: the file system's own share (on a busy ext4 disk, allocating an inode skips those
  deleted in the last seconds, a scan that can cost more than all the rest: perf shows
  `__ext4_new_inode` -> `find_inode_bit` -> `recently_deleted`); `--unpack-in /dev/shm`
  unpacks on tmpfs as well;
- for where the time goes: `git ls-files` alone and sha256 over 50 MB held in memory.

Targets: the snapshot under 1 s, unpacking under 0.5 s. Usage:
    python -m bench.snapshots [--files 2000] [--mb 50] [--repeats 5] [--unpack-in DIR]
"""

import argparse
import hashlib
import os
import random
import statistics
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from subprocess import PIPE
from typing import Any

from bench.common import table
from gpuq.snapshots import Project, collect, provenance, snapshot_to_file

EDITED = 50  #: committed files edited afterwards
UNTRACKED = 20  #: files added after the commit, not ignored
IGNORED = 200  #: run outputs under an ignored folder, which must stay out
SNAPSHOT_TARGET_S = 1.0
UNPACK_TARGET_S = 0.5
GIT = ("git", "-c", "user.name=bench", "-c", "user.email=bench@example.com")


def sizes(files: int, total: int, rng: random.Random) -> list[int]:
    """`files` sizes adding up to `total` bytes: log-normal, so most are small and a few
    large, none empty."""
    weights = [rng.lognormvariate(0, 1.6) for _ in range(files)]
    scale = total / sum(weights)
    drawn = [max(1, int(w * scale)) for w in weights]
    drawn[drawn.index(max(drawn))] += total - sum(drawn)
    return drawn


def make_project(root: Path, files: int, total: int) -> None:
    """The benchmark's repository at `root`: committed, then edited, added to and run in."""
    rng = random.Random(51)
    root.mkdir()
    committed = files - UNTRACKED - 1  # and .gitignore
    names = []
    for n, size in enumerate(sizes(files - 1, total, rng)):
        suffix = ".py" if size < 64 * 1024 else ".bin"
        name = f"pkg{n % 8}/mod{n % 5}/file{n}{suffix}"
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(size))
        names.append(name)
        if n + 1 == committed:
            (root / ".gitignore").write_text("runs/\n")
            subprocess.run(["git", "init", "-q", "-b", "main"], cwd=root, check=True)
            subprocess.run([*GIT, "add", "-A"], cwd=root, check=True)
            subprocess.run([*GIT, "commit", "-q", "-m", "bench"], cwd=root, check=True)
    for name in rng.sample(names[:committed], EDITED):
        with (root / name).open("r+b") as file:
            file.write(b"edited")
    for n in range(IGNORED):
        path = root / "runs" / f"run{n % 10}" / f"out{n}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(4096))


def median_s(repeats: int, step: Callable[[], Any]) -> tuple[float, list[Any]]:
    """The median seconds of `repeats` runs of `step`, and what each run returned."""
    times, results = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        results.append(step())
        times.append(time.perf_counter() - start)
    return statistics.median(times), results


def snapshot_once(root: Path, out: Path) -> str:
    """A snapshot as `gpuq run` makes one, its file removed after: its sha256."""
    project = collect(root, outside_git=False)
    assert project is not None
    snapshot, path = snapshot_to_file(project, out)
    path.unlink()
    return snapshot.sha256


def fresh_folder_times(scratch: Path, steps: list[Callable[[Path], Any]]) -> list[float]:
    """Seconds each of `steps` takes, one after the other, each on a fresh folder under
    `scratch`. The folders are kept until the end and the disk is synced before each step,
    so that one step's writeback does not land in the next one's time."""
    times = []
    for step in steps:
        target = Path(tempfile.mkdtemp(dir=scratch))
        os.sync()
        start = time.perf_counter()
        step(target)
        times.append(time.perf_counter() - start)
    return times


def unpack(tar: Path, target: Path) -> None:
    """`tar` unpacked into `target` as a job's start unpacks it (`worker.snapshot_copy`)."""
    with tarfile.open(tar, "r:") as archive:
        archive.extractall(target, filter="tar")


def create_empty(names: tuple[str, ...], target: Path) -> None:
    """Each of `names` made as an empty file under `target`: what creating the files costs
    on this file system, whatever unpacks them."""
    for name in names:
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()


def snapshot_rows(root: Path, scratch: Path, repeats: int) -> tuple[list[list[str]], Path]:
    """The snapshot's rows (each step's median over `repeats` runs), and one of its tars."""
    project = collect(root, outside_git=False)
    assert project is not None
    first = time.perf_counter()
    first_sha = snapshot_once(root, scratch)
    first_s = time.perf_counter() - first
    whole_s, shas = median_s(repeats, lambda: snapshot_once(root, scratch))
    assert set(shas) == {first_sha}, "an unchanged tree gave another sha256"
    collect_s, _ = median_s(repeats, lambda: collect(root, outside_git=False))
    tar_s, tars = median_s(repeats, lambda: snapshot_to_file(project, scratch))
    provenance_s, _ = median_s(repeats, lambda: provenance(project))
    listing = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    ls_files_s, _ = median_s(repeats, lambda: subprocess.run(listing, cwd=root, stdout=PIPE))
    data = bytes(project.total_size)
    hash_s, _ = median_s(repeats, lambda: hashlib.sha256(data).hexdigest())
    verdict = "met" if whole_s < SNAPSHOT_TARGET_S else "MISSED"
    rows = [
        ["snapshot: collect + tar + sha256 (first)", f"{first_s:.3f}", ""],
        ["snapshot: collect + tar + sha256 (unchanged, same sha)", f"{whole_s:.3f}",
         f"< {SNAPSHOT_TARGET_S} s: {verdict}"],
        ["  collect", f"{collect_s:.3f}", ""],
        ["  snapshot_to_file (tar + sha256)", f"{tar_s:.3f}", ""],
        ["  of which git ls-files", f"{ls_files_s:.3f}", ""],
        [f"  of which sha256 over {project.total_size / 2**20:.0f} MiB in memory",
         f"{hash_s:.3f}", ""],
        ["provenance (git rev-parse, status, diff)", f"{provenance_s:.3f}", ""],
    ]  # fmt: skip
    return rows, tars[-1][1]


def unpack_rows(tar: Path, scratch: Path, repeats: int) -> list[list[str]]:
    """Unpacking's rows under `scratch`: its median and slowest, beside the cost of
    creating as many files empty there."""
    with tarfile.open(tar, "r:") as archive:
        names = tuple(archive.getnames())
    # in turns, so that both see the disk as busy as the other does
    turns = fresh_folder_times(
        scratch,
        [partial(unpack, tar), partial(create_empty, names)] * repeats,
    )
    unpacks, creates = turns[::2], turns[1::2]
    unpack_s = statistics.median(unpacks)
    verdict = "met" if unpack_s < UNPACK_TARGET_S else "MISSED"
    size = tar.stat().st_size / 2**20
    return [
        [f"unpack ({size:.1f} MiB tar, filter='tar') in {scratch}", f"{unpack_s:.3f}",
         f"< {UNPACK_TARGET_S} s: {verdict}"],
        ["  slowest of the unpacks", f"{max(unpacks):.3f}", ""],
        [f"  {len(names):,} empty files created there, in turns with the unpacks",
         f"{statistics.median(creates):.3f}", ""],
    ]  # fmt: skip


def describe(project: Project) -> str:
    """One line about what the snapshot holds."""
    skipped = ", ".join(project.skipped) or "none"
    return f"{len(project.files):,} files, {project.total_size / 2**20:.1f} MiB, skipped: {skipped}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--mb", type=float, default=50, help="the project's size, MB (10^6)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--unpack-in", type=Path, action="append", help="also unpack under this folder"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuq-bench-snapshots-") as folder:
        root, scratch = Path(folder) / "project", Path(folder) / "scratch"
        scratch.mkdir()
        make_project(root, args.files, int(args.mb * 1e6))
        project = collect(root, outside_git=False)
        assert project is not None
        print(f"project: {describe(project)}; median of {args.repeats}")
        rows, tar = snapshot_rows(root, scratch, args.repeats)
        rows += unpack_rows(tar, scratch, args.repeats)
        for place in args.unpack_in or ():
            with tempfile.TemporaryDirectory(dir=place) as elsewhere:
                rows += unpack_rows(tar, Path(elsewhere), args.repeats)
        print(table(["step", "seconds", "target"], rows))


if __name__ == "__main__":
    main()
