"""Where a snapshot's code came from, as the submitting machine sees it: git's commit,
branch and uncommitted changes, the interpreter, and the lock or requirements file beside
the code. The keys are `gpuq.contract.provenance.Provenance`'s (less `folder`, which the
CLI knows)."""

import hashlib
import platform
import stat
import sys
from pathlib import Path, PurePosixPath

from gpuq.snapshots.files import Project
from gpuq.snapshots.git import git_text, run_git

#: The files that say what the code needs, the most exact first: the first found names the
#: environment (in the working folder before the project's root, for each kind in turn).
LOCKFILES = (
    "uv.lock",
    "poetry.lock",
    "Pipfile.lock",
    "requirements.lock",
    "requirements.txt",
    "pyproject.toml",
)
#: `git diff`'s output whatever the user's configuration: no colour, no external or
#: text-converting diff tools, the usual prefixes (the hash must mean the change).
DIFF = (
    "diff", "HEAD", "--binary", "--no-color", "--no-ext-diff", "--no-textconv",
    "--src-prefix=a/", "--dst-prefix=b/",
)  # fmt: skip


def provenance(project: Project) -> dict[str, str | bool | None]:
    """The project's provenance: `git_commit` (None outside git or before a first commit),
    `git_branch` (None when detached), `git_dirty`, `git_diff_sha256` (of `git diff HEAD
    --binary`; None when there is no change to tracked files), `python`, `lockfile` (its
    name in the snapshot) and `lockfile_sha256`."""
    found = found_lockfile(project)
    return {
        **git_provenance(project.root if project.in_git else None),
        "python": f"{sys.executable} ({platform.python_implementation()} "
        f"{platform.python_version()})",
        "lockfile": found[0] if found else None,
        "lockfile_sha256": found[1] if found else None,
    }


def git_provenance(top: Path | None) -> dict[str, str | bool | None]:
    """git's commit, branch, dirtiness and diff hash at the work tree's top `top`."""
    state: dict[str, str | bool | None] = dict.fromkeys(
        ("git_commit", "git_branch", "git_dirty", "git_diff_sha256")
    )
    if top is None:
        return state
    state["git_commit"] = git_text(top, "rev-parse", "--verify", "-q", "HEAD^{commit}")
    state["git_branch"] = git_text(top, "symbolic-ref", "-q", "--short", "HEAD")
    status = run_git(top, "status", "--porcelain")
    if status is not None and status.returncode == 0:
        state["git_dirty"] = bool(status.stdout.strip())
    if state["git_commit"] and state["git_dirty"]:
        diff = run_git(top, *DIFF)
        if diff is not None and diff.returncode == 0 and diff.stdout:
            state["git_diff_sha256"] = hashlib.sha256(diff.stdout).hexdigest()
    return state


def found_lockfile(project: Project) -> tuple[str, str] | None:
    """The name in the snapshot and the sha256 of the first of LOCKFILES found in the
    working folder or at the root; None when there is none (links are not followed)."""
    held = set(project.files)
    for kind in LOCKFILES:
        for folder in (project.workdir, PurePosixPath(".")):
            name = (folder / kind).as_posix()
            if name not in held:
                continue
            path = project.root / name
            try:
                if stat.S_ISREG(path.lstat().st_mode):
                    return name, hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError:
                continue  # gone since it was collected, or unreadable: not evidence

    return None
