"""gpuq's writers to one SQLite file take turns through a lock file beside it.

SQLite lets one writer in at a time; a process that finds another's write under way is
put to sleep by SQLite's busy handler for 1, 2, 5, 10, 15, 20, 25... ms between tries,
however soon the other commits. The API and the scheduler's process write all the time (a
201, a start, an exit), so their writes met often, and one that waited slept a few ms at
the mean and up to ~80 ms (a 200-job drain: 85 of 200 group commits waited). Taking a turn
on a lock file first, a writer waits only as long as the write before it holds the file,
tried again every `STEP_S` at most: SQLite's own lock then finds the way free.

The lock orders gpuq's own writers alone: anything else that writes the database still
meets SQLite's lock, whose busy handler waits for it as before. A writer that cannot get a
turn within the busy timeout (SQLite's, 10 s) goes ahead without one and leaves it to
SQLite; a lock file that cannot be opened leaves every write to SQLite, as before.
"""

import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

#: the first waits between tries, then `STEP_S` each
FIRST_STEPS_S = (0.00005, 0.0001)
STEP_S = 0.00025


class WriteTurns:
    """The turn-taking lock of the SQLite database at `database` (`<database>-write.lock`,
    made the database's owner's, 0600: another account could otherwise hold it)."""

    def __init__(self, database: Path, busy_timeout_s: float) -> None:
        self.database = database
        self.path = database.with_name(f"{database.name}-write.lock")
        self.busy_timeout_s = busy_timeout_s
        self._fd: int | None = None
        self._tried = False

    @contextlib.contextmanager
    def turn(self, *, patient: bool = False) -> Iterator[None]:
        """Holds this process's turn to write for the block (one thread of the process at
        a time: the caller's own lock sees to that). `patient`: waits however long the
        turn before takes (a migration), instead of leaving the write to SQLite."""
        fd = self._open()
        taken = fd is not None and (self._wait(fd) if patient else self._take(fd))
        try:
            yield
        finally:
            if taken:
                assert fd is not None
                fcntl.flock(fd, fcntl.LOCK_UN)

    def _take(self, fd: int) -> bool:
        """True once the lock is this process's; False if `busy_timeout_s` went by first."""
        deadline = time.monotonic() + self.busy_timeout_s
        steps = iter(FIRST_STEPS_S)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    log.warning("no turn to write in %g s; SQLite decides", self.busy_timeout_s)
                    return False
                time.sleep(next(steps, STEP_S))

    def _wait(self, fd: int) -> bool:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return True

    def _open(self) -> int | None:
        if self._tried:
            return self._fd
        self._tried = True
        flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            log.info("writes wait on SQLite's lock alone: cannot open %s: %s", self.path, exc)
            return None
        with contextlib.suppress(OSError):  # made by root for a database that is not root's
            owner = os.stat(self.database)
            if os.fstat(fd).st_uid != owner.st_uid:
                os.fchown(fd, owner.st_uid, owner.st_gid)
        self._fd = fd
        return fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd, self._tried = None, True
