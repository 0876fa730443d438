"""SQLite, in an `--api-only` process: hears other processes' commits as they happen.

Beside the scheduling `gpuq serve`, an `--api-only` process's long polls (`gpuq watch`,
`gpuq run`, `/v1/events`) must answer when the scheduler changes a job, not at their next
look (0.25 s). SQLite tells no one of a commit, but every commit writes to the write-ahead
log beside the database (`gpuq.db-wal`), and Linux tells of that (inotify, through
`inotify_simple`).

On each change to the log the watcher asks SQLite (`PRAGMA data_version`, on a connection
that never writes) whether the database changed since this process last looked. It looks
within a turn (this process's write lock, then the turn all gpuq's processes take), so
that the writer that wrote the log has committed and let go. This process's own writes
look once they have committed, within their turn, so that what the watcher finds changed
is another process's commit; a change heard while one of them is under way needs no look
(that write notifies anyway, and a commit after it writes the log again). A writer that
takes no turn (not gpuq) may not have made its commit visible when the watcher looks; that
one is left to the poll.
"""

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from service.store.file_watch import FileWatch


class ForeignCommits:
    """Calls `heard()` when a process other than this one has committed to `database`."""

    def __init__(
        self,
        database: Path,
        version: Callable[[], int],
        lock: threading.Lock,
        turn: Callable[[], AbstractContextManager[None]],
        heard: Callable[[], None],
    ) -> None:
        """`version()`: SQLite's `PRAGMA data_version` on a connection that never writes;
        `lock`: this process's write lock; `turn()`: that lock and the turn of all gpuq's
        processes, as this process's writes hold them from before they begin until after
        they have committed and looked."""
        self._version = version
        self._lock = lock
        self._turn = turn
        self._heard = heard
        self._seen = version()
        self._watch = FileWatch(database.with_name(f"{database.name}-wal"), self._log_changed)

    def start(self) -> bool:
        """Starts watching; False where the log cannot be watched."""
        return self._watch.start()

    def stop(self) -> None:
        self._watch.stop()

    def look(self) -> bool:
        """Within a turn: whether the database changed since this process last looked
        (another process committed meanwhile); remembers it as seen."""
        version = self._version()
        changed, self._seen = version != self._seen, version
        return changed

    def _log_changed(self) -> None:
        if self._lock.locked():  # one of ours is under way: it notifies
            return
        with self._turn():
            changed = self.look()
        if changed:
            self._heard()
