"""git, as the snapshot asks it: never through a shell, bounded in time, with names as they
are (`core.quotepath=off`); a host without git is a folder outside git."""

import os
import subprocess
from pathlib import Path

from gpuq.snapshots.errors import SnapshotError

TIMEOUT_S = 30.0
#: --no-optional-locks: `git status` must not take the index's lock from the user's own git
#: (it refreshes the index when it can, which a concurrent `git commit` would then trip on).
OPTIONS = ("-c", "core.quotepath=off", "--no-optional-locks")


def run_git(folder: Path, *args: str) -> subprocess.CompletedProcess[bytes] | None:
    """`git ARGS` run in `folder`, whatever its exit status; None where git is not
    installed. Raises SnapshotError when it takes over TIMEOUT_S."""
    try:
        return subprocess.run(
            ["git", *OPTIONS, *args],
            cwd=folder,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError:
        return None
    except subprocess.TimeoutExpired:
        raise SnapshotError(
            f"`git {' '.join(args)}` took over {TIMEOUT_S:.0f} s in {folder}"
        ) from None


def git_text(folder: Path, *args: str) -> str | None:
    """The first line `git ARGS` prints in `folder`; None when it fails or git is absent."""
    done = run_git(folder, *args)
    if done is None or done.returncode != 0:
        return None
    return os.fsdecode(done.stdout.rstrip(b"\n")) or None


def work_tree_top(folder: Path) -> Path | None:
    """The top of the git work tree `folder` is in; None outside one (or without git)."""
    top = git_text(folder, "rev-parse", "--show-toplevel")
    return Path(top) if top else None
