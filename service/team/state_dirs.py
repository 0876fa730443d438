"""The modes of gpuq's state directory: members reach the local socket and (GPUQ_RUN_AS=owner)
their own run directories, and read nothing else of it; the database is gpuq's alone."""

import logging
import os
import stat
from pathlib import Path

from service.settings import Settings

log = logging.getLogger(__name__)

HOME_MODE = 0o711  #: others may pass through to the socket and their runs, not list
PRIVATE_MODE = 0o700
DATABASE_FILES = ("gpuq.db", "gpuq.db-wal", "gpuq.db-shm", "gpuq.db-journal")


def prepare(settings: Settings) -> None:
    """Creates the state directory and sets its modes; warns if members' jobs could not
    reach their run directories."""
    home, runs = settings.home, settings.runs_dir
    home.mkdir(parents=True, exist_ok=True)
    runs.mkdir(exist_ok=True)
    owners = settings.run_as == "owner"
    if _owned_by_me(home):
        home.chmod(HOME_MODE)
    if _owned_by_me(runs):
        # Jobs running as their owners pass through `runs/` to their own folders.
        runs.chmod(HOME_MODE if owners else PRIVATE_MODE)
    if owners:
        closed = [p for p in (runs, *runs.parents) if not os.stat(p).st_mode & stat.S_IXOTH]
        if closed:
            log.warning(
                "%s is closed to other accounts (no x for others), so jobs running as their "
                "owners cannot reach their run directories; choose a GPUQ_HOME every member "
                "can pass through (e.g. /var/lib/gpuq)",
                closed[-1],
            )


def protect_database(settings: Settings) -> None:
    """SQLite's files readable by gpuq alone: they hold every spec and token hash."""
    for name in DATABASE_FILES:
        path = settings.home / name
        if path.exists() and _owned_by_me(path):
            path.chmod(0o600)


def _owned_by_me(path: Path) -> bool:
    return path.stat().st_uid == os.geteuid()
