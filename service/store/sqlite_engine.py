"""SQLite engines as gpuq opens them: WAL, a busy timeout, foreign keys on, every commit on
disk before it is acknowledged, and gpuq's own BEGIN (IMMEDIATE for the writer)."""

from typing import Any

from sqlalchemy import Engine, create_engine, event

BUSY_TIMEOUT_MS = 10_000


def sqlite_engine(url: str, begin: str) -> Engine:
    """An engine on `url` whose transactions start with `begin` (`BEGIN`, or `BEGIN
    IMMEDIATE` for one that writes)."""
    # pysqlite's own transaction handling issues a deferred BEGIN lazily; turning it off
    # and emitting our own BEGIN is the documented way to get IMMEDIATE transactions.
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 10})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        # Every commit reaches the disk before it is acknowledged: a 201 is never lost.
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql(begin)

    return engine
