"""gpuq's writers to one SQLite file take turns through a lock file beside it: real
processes, real locks (`/proc/locks`), a real SQLite file."""

import contextlib
import fcntl
import logging
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from service.store import migrate
from service.store.db import Database
from service.store.write_turns import WriteTurns
from service.team.users import add_user, list_users

#: Another gpuq process: holds a write transaction (and its turn) until its stdin closes.
HOLDER = """
import sys
from service.store import migrate
from service.store.db import Database
from service.team.users import add_user
db = Database.open(sys.argv[1])
with db.write() as session:
    session.connection()
    print("writing", flush=True)
    sys.stdin.read()
add_user(db, "holder")
"""

#: A gpuq process starting: opens the database, says so, and migrates it once told to.
STARTING = """
import sys
from service.store import migrate
from service.store.db import Database
db = Database.open(sys.argv[1], api_only=sys.argv[2] == "api-only")
print("open", flush=True)
sys.stdin.read()
print(*migrate.upgrade(db), flush=True)
db.dispose()
"""


def flock_holders(path: Path) -> set[int]:
    """The pids holding a FLOCK on `path`, as the kernel lists them."""
    inode = os.stat(path).st_ino
    holders = set()
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if fields[1] == "FLOCK" and int(fields[5].split(":")[-1]) == inode:
            holders.add(int(fields[4]))
    return holders


@contextlib.contextmanager
def held(path: Path) -> Iterator[None]:
    """The turn held by a file of its own, as another process's would be."""
    with open(path, "a") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        yield


def test_a_write_waits_for_the_turn_another_process_holds_then_goes_ahead(db, settings):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, settings.db_url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline() == "writing\n"
        lock = settings.home / "gpuq.db-write.lock"
        assert lock.stat().st_mode & 0o777 == 0o600
        assert flock_holders(lock) == {holder.pid}

        done = threading.Event()
        writer = threading.Thread(target=lambda: (add_user(db, "ana"), done.set()))
        writer.start()
        assert not done.wait(0.5)  # its turn has not come
        holder.stdin.close()  # the holder commits and writes once more, in turn
        writer.join(10)
        assert done.is_set()
        assert holder.wait(10) == 0
    finally:
        holder.kill()
        holder.wait()
    assert {u.name for u in list_users(db)} == {"ana", "holder"}
    assert flock_holders(lock) == set()  # each turn ends with its transaction


def test_a_writer_outside_gpuq_still_meets_sqlites_own_lock(db, settings):
    other = sqlite3.connect(settings.home / "gpuq.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    done = threading.Event()
    writer = threading.Thread(target=lambda: (add_user(db, "ana"), done.set()))
    writer.start()
    try:
        assert not done.wait(0.5)  # it has its turn, and waits on SQLite's busy handler
    finally:
        other.execute("COMMIT")
        other.close()
    writer.join(10)
    assert done.is_set()


def test_a_turn_not_given_in_time_leaves_the_write_to_sqlite(tmp_path, caplog):
    database = tmp_path / "gpuq.db"
    database.touch()
    turns = WriteTurns(database, busy_timeout_s=0.2)
    with held(turns.path):
        began = time.monotonic()
        with caplog.at_level(logging.WARNING), turns.turn():
            waited = time.monotonic() - began
    assert 0.2 <= waited < 5
    assert "no turn to write in 0.2 s" in caplog.text
    with turns.turn():  # free again: taken at once
        assert flock_holders(turns.path) == {os.getpid()}
    turns.close()


def test_a_migration_waits_for_its_turn_however_long_it_takes(tmp_path, caplog):
    database = tmp_path / "gpuq.db"
    database.touch()
    turns = WriteTurns(database, busy_timeout_s=0.2)
    with held(turns.path):
        done = threading.Event()

        def migrate_in_turn() -> None:
            with turns.turn(patient=True):
                done.set()

        waiter = threading.Thread(target=migrate_in_turn)
        with caplog.at_level(logging.WARNING):
            waiter.start()
            assert not done.wait(0.6)  # past the busy timeout, still waiting for the turn
    waiter.join(5)
    assert done.is_set()
    assert "no turn" not in caplog.text
    turns.close()


def test_processes_starting_together_on_a_new_database_migrate_one_after_the_other(settings):
    # gpuq serve and an --api-only process (or `gpuq users add`) started at once: Alembic
    # reads the schema's revision, then writes; without turns one of them got "database is
    # locked" every time.
    settings.home.mkdir(parents=True)
    starting = [
        subprocess.Popen(
            [sys.executable, "-c", STARTING, settings.db_url, role],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for role in ("serve", "api-only", "serve", "api-only")
    ]
    try:
        for process in starting:
            assert process.stdout is not None and process.stdout.readline() == "open\n"
        for process in starting:  # all at once
            assert process.stdin is not None
            process.stdin.close()
        said = [(process.stdout.read(), process.stderr.read()) for process in starting]
        for process in starting:
            process.wait(60)
    finally:
        for process in starting:
            process.kill()
            process.wait()
    assert [process.returncode for process in starting] == [0] * 4, said
    head = said[0][0].split()[-1]
    befores = sorted(out.split()[0] for out, _ in said)
    assert befores == sorted(["None", head, head, head])  # one made it, three found it current
    assert {out.split()[-1] for out, _ in said} == {head}


def test_a_lock_file_that_cannot_be_opened_leaves_every_write_to_sqlite(settings, caplog):
    settings.home.mkdir(parents=True)
    lock = settings.home / "gpuq.db-write.lock"
    lock.symlink_to(settings.home / "elsewhere")  # never followed
    db = Database.open(settings.db_url)
    try:
        with caplog.at_level(logging.INFO):
            migrate.upgrade(db)
            add_user(db, "ana")
        assert [u.name for u in list_users(db)] == ["ana"]
        assert "cannot open" in caplog.text
        assert not (settings.home / "elsewhere").exists()
    finally:
        db.dispose()


def test_the_lock_file_is_the_databases_owners_when_root_makes_it(db, settings):
    database = settings.home / "gpuq.db"
    os.chown(database, 4321, 4321)
    lock = settings.home / "gpuq.db-write.lock"
    lock.unlink(missing_ok=True)
    fresh = Database.open(settings.db_url)
    try:
        add_user(fresh, "ana")
    finally:
        fresh.dispose()
    made = lock.stat()
    assert (made.st_uid, made.st_gid, made.st_mode & 0o777) == (4321, 4321, 0o600)
