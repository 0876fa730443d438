"""Throwaway Unix accounts for the tests that really switch users (GPUQ_RUN_AS=owner).

The suite runs as root (as `make test` does). `throwaway_accounts` creates `gpuq-test-ana`
and `gpuq-test-bob` (and a group `gpuq-test-team` that ana is in), lets them pass through
the folders on the way to this test run's interpreter and checkout where those are closed
to others (e.g. a pyenv under /root), and undoes all of it afterwards. The names are the
machine's, so one holder at a time: `make test`'s other worker waits for them (`LOCK`).
"""

import fcntl
import os
import pwd
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ANA, BOB, TEAM = "gpuq-test-ana", "gpuq-test-bob", "gpuq-test-team"
REPO = Path(__file__).resolve().parent.parent
LOCK = Path(tempfile.gettempdir()) / "gpuq-test-accounts.lock"


@dataclass(frozen=True)
class Accounts:
    ana: pwd.struct_passwd
    bob: pwd.struct_passwd
    team_gid: int
    scratch: Path  #: a folder every account may pass through (for GPUQ_HOME)


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


def _remove() -> None:
    for name in (ANA, BOB):
        subprocess.run(["userdel", "--remove", name], capture_output=True)
    subprocess.run(["groupdel", TEAM], capture_output=True)


def _closed_folders(reachable: Sequence[Path]) -> list[Path]:
    """Folders on the way to the interpreter, its prefix, the checkout and `reachable` that
    others may not pass through."""
    targets = [Path(os.path.realpath(sys.executable)), Path(sys.prefix), REPO, *reachable]
    folders = {p for t in targets for p in t.parents}
    folders |= {Path(sys.prefix), REPO, *reachable}
    return sorted(p for p in folders if p.is_dir() and not p.stat().st_mode & stat.S_IXOTH)


@contextmanager
def throwaway_accounts(reachable: Sequence[Path] = ()) -> Iterator[Accounts]:
    """The accounts, and a scratch folder; `reachable`: more folders they must pass
    through (e.g. a test Slurm's spool)."""
    assert os.geteuid() == 0, "these tests switch users: run the suite as root (make test does)"
    with LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with _created(reachable) as accounts:
            yield accounts


@contextmanager
def _created(reachable: Sequence[Path]) -> Iterator[Accounts]:
    _remove()  # left over from an interrupted run
    scratch = Path(tempfile.mkdtemp(prefix="gpuq-run-as-", dir="/tmp"))
    scratch.chmod(0o711)
    opened = {p: p.stat().st_mode for p in _closed_folders(reachable)}
    try:
        _run("groupadd", TEAM)
        for name, extra in ((ANA, ["-G", TEAM]), (BOB, [])):
            _run("useradd", "--create-home", "--home-dir", str(scratch / name), *extra, name)
        for folder in opened:
            folder.chmod(opened[folder] | stat.S_IXOTH)
        yield Accounts(pwd.getpwnam(ANA), pwd.getpwnam(BOB), _gid(TEAM), scratch)
    finally:
        for folder, mode in opened.items():
            folder.chmod(stat.S_IMODE(mode))
        _remove()
        subprocess.run(["rm", "-rf", str(scratch)], check=False)


def _gid(group: str) -> int:
    import grp

    return grp.getgrnam(group).gr_gid


def as_user(
    name: str, *argv: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`argv` run as the account `name` (runuser), with `env` as its whole environment."""
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(env or {})}
    pairs = [f"{k}={v}" for k, v in environment.items()]
    return subprocess.run(
        ["runuser", "-u", name, "--", "env", "-i", *pairs, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
