"""Which host paths a job may name (its data, its `workdir`, its program), and whose rights
judge them:

- GPUQ_RUN_AS=owner: the owner's own, asked as their account (`worker.access`), so a
  member can name nothing through gpuq that they could not open themselves;
- users, and jobs run as gpuq's account: only what really lies (symlinks followed) under
  GPUQ_DATA_DIRS, and never gpuq's own state;
- open mode (no users, loopback only): whatever gpuq can read.
"""

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gpuq.contract.account import Account
from service.errors import Forbidden, Invalid
from service.executors.environment import code_path

#: how long asking as the owner may take (a fresh interpreter, a few stat calls)
ASK_TIMEOUT_S = 20.0

Need = Literal["read", "exec", "enter"]


@dataclass(frozen=True)
class PathUse:
    """A path a spec names, where it names it, and what the job does with it."""

    loc: tuple[str | int, ...]
    path: str
    need: Need


@dataclass(frozen=True)
class PathRules:
    account: Account | None = None  #: judge as this account (GPUQ_RUN_AS=owner)
    roots: tuple[Path, ...] | None = None  #: else: data and workdirs must lie under these
    closed: tuple[Path, ...] = ()  #: never allowed under `roots` (gpuq's own state)

    def check(self, uses: Sequence[PathUse]) -> None:
        """Raises `Invalid` for the first path the job may not use, naming the rule."""
        if self.account is not None:
            for use, problem in zip(uses, ask_as(self.account, uses), strict=True):
                if problem is not None:
                    raise Invalid(use.loc, f"{use.path!r} {problem} (checked as {_who(self)})")
            return
        if self.roots is None:
            return
        for use in uses:
            if use.need == "exec":
                continue  # a program runs as gpuq's account anyway; only data is confined
            problem = outside(Path(use.path), self.roots, self.closed)
            if problem is not None:
                raise Invalid(use.loc, f"{use.path!r} {problem}")


def _who(rules: PathRules) -> str:
    assert rules.account is not None
    return f"the Unix account {rules.account.login}, whose job this is"


def outside(path: Path, roots: Sequence[Path], closed: Sequence[Path]) -> str | None:
    """Why `path`, symlinks followed, is not one a job may use; None if it lies under a root."""
    real = Path(os.path.realpath(path))
    if any(_within(real, c) for c in closed):
        return "lies in gpuq's run directories, which jobs may not read"
    if any(_within(real, r) for r in roots):
        return None
    where = ":".join(str(r) for r in roots) or "(none)"
    return (
        f"is not under GPUQ_DATA_DIRS ({where}), symlinks followed; jobs of a shared gpuq "
        "read data only from there. An admin can add folders to GPUQ_DATA_DIRS"
    )


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def ask_as(account: Account, uses: Sequence[PathUse]) -> list[str | None]:
    """Each path's problem for `account`, judged by the kernel as that account."""
    if not uses:
        return []
    checks = [{"path": u.path, "need": u.need} for u in uses]
    cannot_run = (
        f"the Unix account {account.login} cannot run gpuq's interpreter {sys.executable}: an "
        "admin installs gpuq where every member can read and run it (e.g. a virtualenv under "
        "/opt)"
    )
    try:
        done = subprocess.run(
            # -I but for gpuq's own PYTHONPATH: the environment below is all it has.
            [sys.executable, "-P", "-s", "-m", "worker.access"],
            input=json.dumps(checks),
            capture_output=True,
            text=True,
            user=account.uid,
            group=account.gid,
            extra_groups=list(account.groups),
            umask=0o077,
            env={
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                **({"PYTHONPATH": path} if (path := code_path(os.environ)) else {}),
                **account.environment(),
            },
            cwd="/",
            timeout=ASK_TIMEOUT_S,
        )
    except PermissionError as exc:
        raise Forbidden(cannot_run) from exc
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Forbidden(f"could not check the paths as {account.login}: {exc}") from exc
    try:
        answers = json.loads(done.stdout)
    except ValueError:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise Forbidden(f"{cannot_run} ({last})") from None
    return [a if isinstance(a, str) else None for a in answers]
