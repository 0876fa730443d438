import sqlite3
import threading

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlmodel import SQLModel

from gpuq.service import migrate
from gpuq.service.db import Database
from gpuq.service.users import add_user


def test_sqlite_runs_in_wal_with_busy_timeout_and_foreign_keys(db: Database):
    with db.reader.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 10_000
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL


def test_the_migration_creates_exactly_the_models_tables(db: Database):
    with db.reader.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), SQLModel.metadata) == []


def test_migrating_twice_is_harmless(db: Database):
    migrate.upgrade(db)
    with db.reader.connect() as conn:
        current = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    head = ScriptDirectory.from_config(migrate.alembic_config()).get_current_head()
    assert current == head


def test_write_transactions_take_the_write_lock_up_front(db: Database, settings):
    """A write session holds SQLite's RESERVED lock from BEGIN, so a second writer waits
    (busy_timeout) instead of failing with "database is locked" mid-transaction."""
    entered, release = threading.Event(), threading.Event()

    def hold_write() -> None:
        with db.write() as session:
            session.connection()  # BEGIN IMMEDIATE happens here
            entered.set()
            release.wait(5)

    holder = threading.Thread(target=hold_write)
    holder.start()
    assert entered.wait(5)
    other = sqlite3.connect(settings.home / "gpuq.db", timeout=0.1, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        raise AssertionError("a second writer got the lock while the first held it")
    except sqlite3.OperationalError as exc:
        assert "locked" in str(exc)
    finally:
        release.set()
        holder.join()
        other.close()


def test_a_cached_value_lasts_until_any_connection_commits(db: Database, settings):
    loads = []

    def load() -> int:
        loads.append(1)
        return len(loads)

    assert db.cached("k", load) == 1
    assert db.cached("k", load) == 1  # nothing committed: no second load
    other = Database.open(settings.db_url)  # another process's connection, in effect
    try:
        add_user(other, "ana")
    finally:
        other.dispose()
    assert db.cached("k", load) == 2
    add_user(db, "bo")  # this process's own writes count too
    assert db.cached("k", load) == 3
