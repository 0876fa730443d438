"""On SQLite, a gpuq process hears other processes' commits as they happen (their
write-ahead log, watched with inotify) and not its own: real processes, a real SQLite
file."""

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from service.store import migrate
from service.store.commit_notices import HEARD_POLL_S, POLL_S
from service.store.db import Database
from service.team.users import add_user

#: Another gpuq process: adds a user, one commit.
WRITER = """
import sys
from service.store.db import Database
from service.team.users import add_user
db = Database.open(sys.argv[1])
add_user(db, sys.argv[2])
db.dispose()
"""


@pytest.fixture
def db(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'gpuq.db'}"
    database = Database.open(url, api_only=True)
    migrate.upgrade(database)
    yield database
    database.dispose()


class Notices:
    """Counts the notices `db` gives: one per commit of its own, one per other process's
    commit heard."""

    def __init__(self, db: Database) -> None:
        self.count = 0
        self.came = threading.Event()
        db.notices.forward(self._notified)

    def _notified(self) -> None:
        self.count += 1
        self.came.set()

    def after(self, action) -> int:
        """How many notices `action()` brought, once a second brought no more."""
        before = self.count
        action()
        self.came.wait(5)
        while self.came.wait(1):
            self.came.clear()
        return self.count - before


def another_process_adds(db: Database, name: str) -> None:
    subprocess.run([sys.executable, "-c", WRITER, db.url, name], check=True, timeout=60)


def test_another_processes_commit_is_heard_without_a_write_of_ours(db):
    notices = Notices(db)
    assert notices.after(lambda: another_process_adds(db, "ana")) == 1
    # Waiters then trust the notices, looking on their own only as a safety net.
    assert db.notices.poll_s == HEARD_POLL_S


def test_this_processes_own_commits_are_told_once_not_again_as_anothers(db):
    notices = Notices(db)
    assert notices.after(lambda: [add_user(db, name) for name in ("ana", "bo", "cy")]) == 3
    assert notices.after(lambda: another_process_adds(db, "dee")) == 1
    assert notices.after(lambda: add_user(db, "eve")) == 1


def test_a_process_that_does_not_listen_polls(tmp_path):
    db = Database.open(f"sqlite:///{tmp_path / 'gpuq.db'}")
    try:
        migrate.upgrade(db)
        notices = Notices(db)
        assert notices.after(lambda: another_process_adds(db, "ana")) == 0
        assert db.notices.poll_s == POLL_S
    finally:
        db.dispose()
