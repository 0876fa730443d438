"""The database: SQLite (WAL, busy timeout, foreign keys, BEGIN IMMEDIATE for writes) by
default, or PostgreSQL (`postgres`: one writer at a time, a NOTIFY from every write)."""

import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, DateTime, Engine, TypeDecorator, create_engine, text
from sqlalchemy.engine.url import make_url
from sqlmodel import Field, Session

from service.store import postgres, wake_file
from service.store.change_listener import ChangeListener
from service.store.commit_cache import CommitCache
from service.store.commit_notices import HEARD_POLL_S, CommitNotices
from service.store.file_watch import FileWatch
from service.store.foreign_commits import ForeignCommits
from service.store.sqlite_engine import BUSY_TIMEOUT_MS, sqlite_engine
from service.store.write_turns import WriteTurns

if TYPE_CHECKING:
    import psycopg

_REVISION = text("SELECT value FROM revision WHERE name = :name")
_REVISION_SQL = "SELECT value FROM revision WHERE name = ?"
T = TypeVar("T")


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Stores UTC and always hands back timezone-aware datetimes."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given; use utcnow()")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


def utc_field(**kwargs: Any) -> Any:
    """A table's field stored as `UTCDateTime` (`Field`'s arguments besides)."""
    return Field(sa_type=UTCDateTime, **kwargs)


@dataclass
class Database:
    """A read engine (deferred BEGIN) and a write engine (BEGIN IMMEDIATE) on one database.

    A write that starts as a deferred read must upgrade its lock mid-transaction, which is
    what makes SQLite answer "database is locked"; taking the write lock up front avoids it.
    On PostgreSQL the reader reads one snapshot per transaction and the writer takes an
    advisory lock first (`postgres.engines`): the same one-writer-at-a-time world.
    """

    url: str
    reader: Engine
    writer: Engine
    notices: CommitNotices = field(default_factory=CommitNotices)  #: notified after every commit
    #: One writer at a time in this process: SQLite serialises writers anyway, and threads
    #: queued here wake at once, where SQLite's busy handler would make them sleep and retry.
    _write_lock: threading.Lock = field(default_factory=threading.Lock)
    #: SQLite: and one writer at a time of all gpuq's processes, woken as soon as the one
    #: before commits (SQLite's busy handler would sleep up to 100 ms between tries).
    _turns: WriteTurns | None = None
    #: SQLite: a connection kept to ask `PRAGMA data_version`, which changes whenever
    #: another connection (of any process) has committed; it never writes.
    _version_probe: sqlite3.Connection | None = None
    #: SQLite, in an `--api-only` process: hears other processes' commits as they happen
    _foreign: ForeignCommits | None = None
    #: SQLite: the database's file (None for PostgreSQL or a database in memory)
    file: Path | None = None
    #: SQLite, in an `--api-only` process: wakes the scheduler after each commit
    _wakes: bool = False
    #: SQLite, where jobs are scheduled: hears `--api-only` processes' commits
    _woken_by: FileWatch | None = None
    #: PostgreSQL: the same question, asked of the server's snapshot.
    _change_probe: postgres.ChangeProbe | None = None
    #: PostgreSQL: hears other processes' commits.
    _listener: ChangeListener | None = None
    #: what `cached` keeps
    _cache: CommitCache = field(default_factory=CommitCache)
    #: one thread at a time asks `_version_probe`
    _probe_lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def open(cls, url: str, *, api_only: bool = False) -> "Database":
        """`api_only`: for an `--api-only` process beside a scheduling gpuq serve, whose
        commits wake that scheduler (`wake_on_api_commits`) and which hears other
        processes' commits as they happen (on PostgreSQL every process does)."""
        parsed = make_url(url)
        if parsed.get_backend_name() == "postgresql":
            return cls._open_postgres(url, api_only)
        if parsed.get_backend_name() != "sqlite":
            engine = create_engine(url)
            return cls(url, engine, engine)
        if not parsed.database or parsed.database == ":memory:":
            return cls(url, sqlite_engine(url, "BEGIN"), sqlite_engine(url, "BEGIN IMMEDIATE"))
        path = Path(parsed.database)
        path.parent.mkdir(parents=True, exist_ok=True)
        db = cls(
            url,
            sqlite_engine(url, "BEGIN"),
            sqlite_engine(url, "BEGIN IMMEDIATE"),
            file=path,
            _version_probe=sqlite3.connect(path, check_same_thread=False),
            _turns=WriteTurns(path, BUSY_TIMEOUT_MS / 1000),
            _wakes=api_only,
        )
        if not api_only:
            return db
        heard = ForeignCommits(
            path,
            db._probe_version,
            db._write_lock,
            db._writing,
            db.notices.notify,
        )
        if heard.start():
            db._foreign = heard
            db.notices.poll_s = HEARD_POLL_S
        return db

    @classmethod
    def _open_postgres(cls, url: str, api_only: bool) -> "Database":
        # Signs this Database's notices, to skip its own; an --api-only process's also wake
        # the scheduler.
        origin = (postgres.API_ONLY if api_only else "") + secrets.token_hex(8)
        reader, writer = postgres.engines(url, origin)
        notices = CommitNotices()
        listener = ChangeListener(
            lambda: postgres.dedicated_connection(reader, "gpuq change listener"), notices, origin
        )
        listener.start()
        return cls(
            url,
            reader,
            writer,
            notices,
            _change_probe=postgres.ChangeProbe(reader),
            _listener=listener,
        )

    def wake_on_api_commits(self, wake: Callable[[], None]) -> None:
        """Calls `wake()` whenever an `--api-only` process has committed: the scheduler
        then steps at once rather than at its next poll. On SQLite such a process touches
        a file the scheduler's process watches by itself (`wake_file`), on PostgreSQL its
        notices say so; gpuq serve's own API wakes its scheduler directly."""
        if self._listener is not None:
            self._listener.on_api_commit = wake
        elif self.file is not None:
            self._woken_by = wake_file.on_poke(self.file, wake)

    @property
    def dialect(self) -> str:
        """`sqlite` or `postgresql`."""
        return self.writer.dialect.name

    @property
    def safe_url(self) -> str:
        """The URL without its password, to show."""
        return make_url(self.url).render_as_string(hide_password=True)

    def connect_dedicated(self, purpose: str) -> "psycopg.Connection[Any]":
        """PostgreSQL: a psycopg connection of its own (autocommit, outside the pools)."""
        return postgres.dedicated_connection(self.writer, purpose)

    @contextmanager
    def read(self) -> Iterator[Session]:
        with Session(self.reader, expire_on_commit=False) as session:
            yield session

    @contextmanager
    def write(self) -> Iterator[Session]:
        """One write transaction, committed on success and rolled back on error."""
        with (
            self._writing(),
            self._seeing_own(),
            Session(self.writer, expire_on_commit=False) as session,
            session.begin(),
        ):
            yield session
        self._committed()

    @contextmanager
    def write_connection(self) -> Iterator[Connection]:
        """One write transaction on a Core connection, without an ORM session: as `write`,
        for hot paths that build no objects."""
        with self._writing(), self._seeing_own(), self.writer.begin() as conn:
            yield conn
        self._committed()

    @contextmanager
    def migrating(self) -> Iterator[None]:
        """The database to this process's migration alone (SQLite; on PostgreSQL the
        migration's connection takes the writers' advisory lock itself). Alembic reads the
        schema's revision before it writes, and SQLite answers "database is locked" at once
        to a read that turns into a write while another connection writes: two gpuq
        processes starting together on a new (or older) database would both migrate and one
        would fail. Holding the write turn, waited for however long the other's migration
        takes, the second finds the schema current; a `--api-only` process's watch of
        others' commits looks only once it is done."""
        with self._writing(patient=True), self._seeing_own():
            yield
        self._committed()

    def _committed(self) -> None:
        self.notices.notify()
        if self._wakes and self.file is not None:
            wake_file.poke(self.file)

    @contextmanager
    def _writing(self, *, patient: bool = False) -> Iterator[None]:
        """This process's write lock, then the turn of all gpuq's processes (`patient`: waited
        for however long it takes, `WriteTurns.turn`)."""
        with self._write_lock, self._turn(patient):
            yield

    def _turn(self, patient: bool) -> AbstractContextManager[None]:
        return nullcontext() if self._turns is None else self._turns.turn(patient=patient)

    @contextmanager
    def _seeing_own(self) -> Iterator[None]:
        """Where other processes' commits are heard: once one of this process's writes has
        committed, it is seen (while the turn is still ours, so that no other gpuq
        process's commit comes in between), not heard as another's. What it sees of others'
        meanwhile is told with it: every commit of ours notifies."""
        try:
            yield
        finally:
            if self._foreign is not None:
                self._foreign.look()

    def cached(self, key: str, load: Callable[[], T], *, revision: str | None = None) -> T:
        """`load()`'s value, kept until anything is committed to the database (by this
        process or another); loaded every time where that cannot be told. With `revision`
        (a row of the `revision` table, which triggers raise on every change to what it
        watches), kept across commits too, until that revision changes."""
        read_revision = None if revision is None else lambda: self._revision(revision)
        return self._cache.get(key, load, self._version(), read_revision)

    def _revision(self, name: str) -> int | None:
        if self._version_probe is not None:  # SQLite: the probe's connection reads it at once
            with self._probe_lock:
                row = self._version_probe.execute(_REVISION_SQL, (name,)).fetchone()
            return None if row is None else int(row[0])
        with self.reader.connect() as connection:
            return connection.execute(_REVISION, {"name": name}).scalar()

    def _version(self) -> object | None:
        """What changes whenever anything commits; None where that cannot be told."""
        if self._change_probe is not None:
            return self._change_probe.version()
        if self._version_probe is None:
            return None
        return self._probe_version()

    def _probe_version(self) -> int:
        assert self._version_probe is not None
        with self._probe_lock:
            return int(self._version_probe.execute("PRAGMA data_version").fetchone()[0])

    def dispose(self) -> None:
        if self._listener is not None:
            self._listener.stop()
        if self._foreign is not None:
            self._foreign.stop()
        if self._woken_by is not None:
            self._woken_by.stop()
        if self._change_probe is not None:
            self._change_probe.close()
        self.reader.dispose()
        self.writer.dispose()
        if self._version_probe is not None:
            self._version_probe.close()
        if self._turns is not None:
            self._turns.close()
