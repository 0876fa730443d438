import asyncio
import contextlib
import itertools
import sqlite3
import threading
import time
from collections.abc import Callable

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlmodel import SQLModel

from gpuq.contract.spec import JobSpec
from service.store import (
    migrate,
    snapshot_tables,  # noqa: F401  (its tables in SQLModel.metadata)
    usage_tables,  # noqa: F401  (its tables in SQLModel.metadata)
)
from service.store.commit_notices import HEARD_POLL_S
from service.store.db import Database
from service.store.postgres import WRITE_LOCK_KEY
from service.team.users import add_user, list_users, revoke_user
from tests.conftest import ANA, job_spec
from tests.submitting import submit_job

BOTH = pytest.mark.backends("sqlite", "postgres")
POSTGRES = pytest.mark.backends("postgres")


def test_sqlite_runs_in_wal_with_busy_timeout_and_foreign_keys(db: Database):
    with db.reader.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 10_000
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL


@BOTH
def test_the_migration_creates_exactly_the_models_tables(db: Database):
    with db.reader.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": migrate.compare_type})
        assert compare_metadata(context, SQLModel.metadata) == []


@BOTH
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


def counting() -> Callable[[], int]:
    """A loader that returns how many times it has been called."""
    loads = itertools.count(1)
    return lambda: next(loads)


@BOTH
def test_a_cached_value_lasts_until_any_connection_commits(db: Database, settings):
    load = counting()
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


@BOTH
def test_a_value_cached_by_revision_lasts_until_what_it_watches_changes(db: Database, settings):
    load = counting()

    def cached() -> int:
        return db.cached("users", load, revision="users")

    assert cached() == 1
    submit_job(db, spec=JobSpec.model_validate(job_spec()), caller=ANA)
    assert cached() == 1  # a commit, but no user changed: no second load
    add_user(db, "ana")
    assert cached() == 2
    revoke_user(db, "ana")
    assert cached() == 3
    # Whoever writes, however: a program of its own deleting a row by hand.
    if db.dialect == "postgresql":
        with psql(settings) as conn:
            conn.execute('DELETE FROM "user"')
    else:
        with contextlib.closing(sqlite3.connect(settings.home / "gpuq.db")) as conn, conn:
            conn.execute('DELETE FROM "user"')
    assert cached() == 4
    submit_job(db, spec=JobSpec.model_validate(job_spec()), caller=ANA)
    assert cached() == 4


def psql(settings) -> psycopg.Connection:
    """A connection of a program other than gpuq to the test's PostgreSQL database."""
    url = settings.db_url.replace("postgresql+psycopg://", "postgresql://")
    return psycopg.connect(url, autocommit=True)


def try_lock(conn: psycopg.Connection, key: int) -> bool:
    return conn.execute("SELECT pg_try_advisory_lock(%s::bigint)", (key,)).fetchone()[0]


def woken_by(db: Database, write: Callable[[], object], within_s: float = 2) -> bool:
    """Whether `db`'s waiters are told of a change within `within_s` of `write()` (which
    may fail)."""

    async def wait() -> bool:
        notice = db.notices.arm()
        try:
            with contextlib.suppress(RuntimeError):
                await asyncio.to_thread(write)
            await asyncio.wait_for(asyncio.shield(notice), within_s)
            return True
        except TimeoutError:
            return False
        finally:
            db.notices.disarm(notice)

    return asyncio.run(wait())


@POSTGRES
def test_postgres_write_transactions_take_the_write_lock_up_front(db: Database, settings):
    """One writer at a time, as with SQLite: a write session holds the advisory lock from
    its first statement, whichever process a second writer is in."""
    entered, release = threading.Event(), threading.Event()

    waits: list[str] = []

    def hold_write() -> None:
        with db.write() as session:
            waits.append(session.connection().exec_driver_sql("SHOW lock_timeout").scalar())
            entered.set()
            release.wait(5)

    holder = threading.Thread(target=hold_write)
    holder.start()
    assert entered.wait(5)
    assert waits == ["10s"], "a writer waits for the lock as long as SQLite's busy timeout"
    with psql(settings) as other:
        try:
            held_by_other = try_lock(other, WRITE_LOCK_KEY)
        finally:
            release.set()
            holder.join()
        assert not held_by_other, "a second writer got the lock while the first held it"
        assert try_lock(other, WRITE_LOCK_KEY), "the lock outlived the transaction"


def test_revisions_given_with_a_write_or_by_the_trigger_rise_above_all_others(
    db: Database, settings
):
    """gpuq's writes give the next revision themselves (migration 0016); a writer outside
    gpuq that leaves `rev` alone or gives one no higher than the rest gets the next one
    from the trigger, so revisions still follow commit order."""
    spec = JobSpec.model_validate(job_spec())
    first, _ = submit_job(db, spec=spec, caller=ANA)
    second, _ = submit_job(db, spec=spec, caller=ANA)
    assert (first.rev, second.rev) == (1, 2)
    outside = sqlite3.connect(settings.home / "gpuq.db", isolation_level=None)
    try:
        row = outside.execute("SELECT * FROM job WHERE id = ?", (first.id,)).fetchone()
        names = [d[0] for d in outside.execute("SELECT * FROM job LIMIT 0").description]
        copy = dict(zip(names, row, strict=True))
        del copy["id"], copy["idempotency_key"]
        copy["rev"] = 0  # the column's default, as a writer that leaves it alone stores
        columns, marks = ", ".join(copy), ", ".join("?" for _ in copy)
        outside.execute(f"INSERT INTO job ({columns}) VALUES ({marks})", list(copy.values()))
        outside.execute("UPDATE job SET priority = 7 WHERE id = ?", (first.id,))  # rev left alone
        # a revision below the rest (job 1's old one, free now)
        outside.execute("UPDATE job SET priority = 8, rev = 1 WHERE id = ?", (second.id,))
        revisions = outside.execute("SELECT id, rev FROM job ORDER BY id").fetchall()
    finally:
        outside.close()
    assert revisions == [(1, 4), (2, 5), (3, 3)]
    fourth, _ = submit_job(db, spec=spec, caller=ANA)
    assert fourth.rev == 6
    with db.read() as session:
        stored = session.connection().exec_driver_sql("SELECT rev FROM job WHERE id = 4").scalar()
    assert stored == 6  # what the insert answered is what the row holds


@POSTGRES
def test_postgres_revisions_follow_commit_order_even_beside_writers_outside_gpuq(
    db: Database, settings
):
    """A reader that has seen revision N has seen every change below it: a transaction
    that took a revision holds the write lock until it ends, so later ones go higher."""
    spec = JobSpec.model_validate(job_spec())
    first, _ = submit_job(db, spec=spec, caller=ANA)
    revisions: list[int] = []
    with psql(settings) as outside:
        outside.execute("BEGIN")
        outside.execute("UPDATE job SET priority = 5 WHERE id = %s", (first.id,))
        outside_rev = outside.execute("SELECT rev FROM job WHERE id = %s", (first.id,)).fetchone()[
            0
        ]
        writer = threading.Thread(
            target=lambda: revisions.append(submit_job(db, spec=spec, caller=ANA)[0].rev)
        )
        writer.start()
        writer.join(0.5)
        assert not revisions, "gpuq committed while an older revision was not yet committed"
        outside.execute("COMMIT")
        writer.join(10)
    assert first.rev < outside_rev < revisions[0]


@POSTGRES
def test_postgres_a_commit_by_another_process_wakes_this_ones_waiters(db: Database, settings):
    """LISTEN/NOTIFY: a waiter here wakes on another process's commit at once, not at its
    next look at the database; a rolled-back write wakes nobody."""
    assert db._listener is not None and db._listener.listening.wait(5)
    assert db.notices.poll_s == HEARD_POLL_S
    other = Database.open(settings.db_url)  # another process's, in effect

    def failed_write() -> None:
        with other.write() as session:
            session.connection()
            raise RuntimeError("rolled back")

    try:
        assert woken_by(db, lambda: add_user(other, "ana"))
        assert not woken_by(db, failed_write, within_s=0.5)
    finally:
        other.dispose()


@POSTGRES
def test_postgres_the_listener_reconnects_when_its_connection_dies(db: Database, settings):
    listener = db._listener
    assert listener is not None and listener.listening.wait(5)
    scheduler_woken = threading.Event()
    db.wake_on_api_commits(scheduler_woken.set)
    with psql(settings) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'gpuq change listener' AND datname = current_database()"
        )
        deadline = time.monotonic() + 5
        while listener.listening.is_set():  # it notices the loss...
            assert time.monotonic() < deadline, "the listener missed that its connection died"
            time.sleep(0.01)
        assert listener.listening.wait(5), "the listener did not listen again"
        # What --api-only processes committed meanwhile went unheard: the scheduler looks.
        assert scheduler_woken.is_set()
        assert woken_by(db, lambda: admin.execute("NOTIFY gpuq_changes, 'elsewhere'"))


@POSTGRES
def test_postgres_urls_go_through_psycopg_and_show_no_password(settings):
    plain = settings.db_url.replace("postgresql+psycopg://postgres@", "postgresql://postgres:pw@")
    db = Database.open(plain)  # SQLAlchemy would pick psycopg2 for postgresql://
    try:
        assert db.reader.dialect.driver == "psycopg"
        assert ":pw@" not in db.safe_url and ":***@" in db.safe_url
        assert list_users(db) == []  # connected (the test cluster trusts loopback)
    finally:
        db.dispose()
    with pytest.raises(ValueError, match=r"postgresql\+psycopg://"):
        Database.open(settings.db_url.replace("+psycopg", "+asyncpg"))
