"""One scheduler per database: a file lock beside SQLite, an advisory lock on PostgreSQL.

A file lock only protects one host, and PostgreSQL may be shared by several; its advisory
lock belongs to one connection, so a scheduler that dies (even by SIGKILL) frees it when
the server sees that connection close.
"""

import fcntl
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from service.store.db import Database

if TYPE_CHECKING:
    import psycopg

#: The advisory lock's key, the same in every gpuq ("gpuq" in ASCII); advisory locks are
#: per database, so schedulers of other databases on the same server do not meet it.
ADVISORY_KEY = 0x67707571


class SchedulerLocked(RuntimeError):
    """Another scheduler already runs against this database."""


class SchedulerLock:
    def __init__(self, db: Database, home: Path) -> None:
        self.db = db
        self.home = home
        self._file: IO[bytes] | None = None
        self._connection: psycopg.Connection[Any] | None = None  #: PostgreSQL: holds the lock

    def take(self) -> None:
        """Takes the lock until `release()` (or this process's end); `SchedulerLocked` if
        another scheduler holds it."""
        if self.db.dialect == "postgresql":
            self._take_advisory()
        else:
            self._take_file()

    def held(self) -> bool:
        """Whether the lock is still ours: on PostgreSQL it goes with its connection (a
        server restart, a network cut), and a scheduler without it must stop."""
        if self._file is not None:
            return True
        if self._connection is None:
            return False
        import psycopg

        try:
            self._connection.execute("SELECT 1")
        except psycopg.Error:  # the connection, and the lock with it, is gone
            return False
        return True

    def release(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._connection is not None:
            self._connection.close()  # the server drops the session's advisory locks
            self._connection = None

    def _take_file(self) -> None:
        path = self.home / "scheduler.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path, "wb")  # noqa: SIM115 (held open for the scheduler's lifetime)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise SchedulerLocked(
                f"another gpuq serve is already scheduling jobs from {self.home}"
            ) from None
        self._file = lock

    def _take_advisory(self) -> None:
        connection = self.db.connect_dedicated("gpuq scheduler lock")
        row = connection.execute(
            "SELECT pg_try_advisory_lock(%s::bigint)", (ADVISORY_KEY,)
        ).fetchone()
        if row is None or not row[0]:
            holder = _holder(connection)
            connection.close()
            raise SchedulerLocked(
                f"another gpuq serve is already scheduling jobs from this PostgreSQL "
                f"database ({self.db.safe_url}){holder}"
            )
        self._connection = connection


def _holder(connection: "psycopg.Connection[Any]") -> str:
    """Where the lock's holder connects from, to say in the refusal (best effort)."""
    row = connection.execute(
        "SELECT a.client_addr, a.pid FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.database = "
        "(SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND l.classid = 0 AND l.objid = %s::bigint::oid LIMIT 1",
        (ADVISORY_KEY,),
    ).fetchone()
    if row is None:
        return ""
    address = row[0] or "a local socket"
    return f"; it holds the lock from {address} (server pid {row[1]})"
