"""PostgreSQL engines: snapshot reads, one writer at a time, and a NOTIFY from every write.

SQLite lets one writer in at a time (BEGIN IMMEDIATE), and gpuq relies on it: job
revisions grow in commit order, a quota is counted and then used, an idempotency key is
looked up and then stored. A transaction-level advisory lock taken first in every write
transaction keeps that true here, across processes and hosts. The same statement
notifies `CHANNEL`, which PostgreSQL delivers to every listener when (and only if) the
transaction commits.
"""

import threading
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine.url import make_url

if TYPE_CHECKING:
    import psycopg

#: Every write transaction notifies it; `change_listener` listens.
CHANNEL = "gpuq_changes"
#: How an `--api-only` process's notices begin: they wake the scheduler too.
API_ONLY = "api-only:"
#: The advisory lock every write transaction takes first ("gpuw" in ASCII). Migration 0005's
#: revision trigger takes it too, so writers outside gpuq keep revisions in order.
WRITE_LOCK_KEY = 0x67707577

#: How long a writer waits for the lock before it fails, as SQLite's busy timeout: a
#: process stuck inside a write transaction must not stop every other one for good.
WRITE_WAIT_MS = 10_000

_LOCK_AND_NOTIFY = (
    "SELECT pg_advisory_xact_lock(%(key)s::bigint), pg_notify(%(channel)s, %(origin)s)"
)


def engines(url: str, origin: str) -> tuple[Engine, Engine]:
    """A reader (each transaction one snapshot, as SQLite's) and a writer whose
    transactions begin with the write lock and a notice signed `origin`."""
    url = psycopg_url(url)
    options = make_url(url).query.get("options", "")  # the URL's own (a search_path) stay
    if not isinstance(options, str):
        options = " ".join(options)
    try:
        reader = create_engine(url, pool_pre_ping=True, isolation_level="REPEATABLE READ")
    except ModuleNotFoundError as exc:
        raise RuntimeError(
            "PostgreSQL needs psycopg: install gpuq with the `postgres` extra "
            "(pip install 'gpuq[postgres]')"
        ) from exc
    # READ COMMITTED: once the lock is ours, each statement sees every earlier commit. A
    # small pool: `Database.write` lets one thread of the process write at a time.
    writer = create_engine(
        url,
        pool_pre_ping=True,
        isolation_level="READ COMMITTED",
        pool_size=2,
        max_overflow=3,
        connect_args={"options": f"{options} -c lock_timeout={WRITE_WAIT_MS}".strip()},
    )
    notice = {"key": WRITE_LOCK_KEY, "channel": CHANNEL, "origin": origin}

    @event.listens_for(writer, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql(_LOCK_AND_NOTIFY, notice)

    return reader, writer


def psycopg_url(url: str) -> str:
    """`url` with psycopg 3 as its driver (`postgresql://` means psycopg2 to SQLAlchemy)."""
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.drivername != "postgresql+psycopg":
        raise ValueError(
            f"gpuq reaches PostgreSQL through psycopg 3: write {parsed.drivername} URLs as "
            "postgresql+psycopg://..."
        )
    return parsed.render_as_string(hide_password=False)


def dedicated_connection(engine: Engine, purpose: str) -> "psycopg.Connection[Any]":
    """A connection of its own, outside the pools and in autocommit, to the engine's
    database: for LISTEN, the scheduler's lock and the change probe."""
    import psycopg

    _, params = engine.dialect.create_connect_args(engine.url)
    # Keepalives: a peer that vanished (host down, network cut) is noticed in about a minute.
    keepalives = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10}
    return psycopg.connect(
        **{**keepalives, **params, "autocommit": True, "application_name": purpose}
    )


class ChangeProbe:
    """Tells whether anything committed between two calls, in one round trip.

    The server's current snapshot (its next transaction id and those in progress) changes
    whenever a transaction takes an id, which every write does, or ends. So an unchanged
    snapshot means nothing committed in between. It covers every database of the server: a
    false alarm only costs a reload.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._lock = threading.Lock()  # one connection, used by many threads in turn
        self._conn: psycopg.Connection[Any] | None = None

    def version(self) -> str | None:
        """The current snapshot; None if the server cannot be asked (no caching then)."""
        import psycopg

        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = dedicated_connection(self._engine, "gpuq change probe")
                row = self._conn.execute("SELECT pg_current_snapshot()::text").fetchone()
                return None if row is None else str(row[0])
            except psycopg.Error:
                self._close()
                return None

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
