"""SQLite: how an `--api-only` process wakes the scheduler of the `gpuq serve` beside it.

After each of its commits (a job stored, cancelled, held or released, a GPU drained), an
`--api-only` process touches `gpuq.db-wake` beside the database (`Database.open(url,
api_only=True)`). The scheduler's process watches that file (`Database.wake_on_api_commits`)
and steps at once, where it would otherwise find the work at its next poll
(`GPUQ_IDLE_POLL_S`, 2 s, when nothing runs). gpuq serve's own API wakes its scheduler over
their socket pair and never touches the file, so the watch costs gpuq serve nothing where
no `--api-only` process runs.
"""

import logging
import os
from collections.abc import Callable
from pathlib import Path

from service.store.file_watch import FileWatch

log = logging.getLogger(__name__)


def wake_file(database: Path) -> Path:
    return database.with_name(f"{database.name}-wake")


def poke(database: Path) -> None:
    """Touches the wake file (made where missing, 0600 like the database's lock)."""
    try:
        fd = os.open(wake_file(database), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            os.utime(fd)
        finally:
            os.close(fd)
    except OSError as exc:  # the scheduler still finds the work at its next poll
        log.warning("could not wake the scheduler (%s): jobs start at its next look", exc)


def on_poke(database: Path, wake: Callable[[], None]) -> FileWatch | None:
    """Calls `wake()` whenever an `--api-only` process pokes; None where it cannot."""
    watching = FileWatch(wake_file(database), wake, make=True)
    return watching if watching.start() else None
