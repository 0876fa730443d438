"""One scheduler per database: a file lock beside SQLite, an advisory lock on PostgreSQL."""

import time

import psycopg
import pytest

from service.scheduler.lock import SchedulerLock, SchedulerLocked
from service.store.db import Database

POSTGRES = pytest.mark.backends("postgres")


@pytest.mark.backends("sqlite", "postgres")
def test_a_second_scheduler_is_refused_until_the_first_lets_go(db, settings):
    first, second = SchedulerLock(db, settings.home), SchedulerLock(db, settings.home)
    first.take()
    assert first.held()
    with pytest.raises(SchedulerLocked, match="already scheduling"):
        second.take()
    assert not second.held()
    first.release()
    second.take()
    second.release()


@POSTGRES
def test_postgres_a_scheduler_on_another_host_is_refused(db, settings, tmp_path):
    """Another host has a state directory of its own, where no file lock could tell."""
    first = SchedulerLock(db, settings.home)
    first.take()
    elsewhere = Database.open(settings.db_url)
    try:
        with pytest.raises(SchedulerLocked) as refused:
            SchedulerLock(elsewhere, tmp_path / "other-host").take()
        message = str(refused.value)
        assert "already scheduling jobs from this PostgreSQL database" in message
        assert "postgres@127.0.0.1" in message and "holds the lock from 127.0.0.1" in message
    finally:
        elsewhere.dispose()
        first.release()


@POSTGRES
def test_postgres_the_lock_goes_with_its_connection(db, settings):
    """A scheduler killed (or cut off) loses the lock with its session, so another can
    take over; the first can tell it no longer holds it."""
    first = SchedulerLock(db, settings.home)
    first.take()
    url = settings.db_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'gpuq scheduler lock' AND datname = current_database()"
        )
    assert not first.held()
    second = SchedulerLock(db, settings.home)
    deadline = time.monotonic() + 5
    while True:  # the server frees the lock once the killed session has exited
        try:
            second.take()
            break
        except SchedulerLocked:
            assert time.monotonic() < deadline, "the dead session's lock was never freed"
            time.sleep(0.05)
    second.release()
    first.release()
