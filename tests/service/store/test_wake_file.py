"""An `--api-only` process wakes the scheduler beside it by touching a file next to the
database; nothing else wakes that watch: real processes, a real SQLite file, inotify."""

import subprocess
import sys
import threading
from pathlib import Path

from service.store import migrate, wake_file
from service.store.db import Database
from service.team.users import add_user

#: Another process: pokes once.
POKER = (
    "import sys; from pathlib import Path; from service.store import wake_file; "
    "wake_file.poke(Path(sys.argv[1]))"
)


def poke_from_another_process(database: Path) -> None:
    subprocess.run([sys.executable, "-c", POKER, str(database)], check=True, timeout=60)


def test_a_poke_wakes_even_after_the_file_was_removed(tmp_path):
    database = tmp_path / "gpuq.db"
    woken = threading.Event()
    watching = wake_file.watch(database, woken.set)
    assert watching is not None
    try:
        assert wake_file.wake_file(database).stat().st_mode & 0o777 == 0o600
        poke_from_another_process(database)
        assert woken.wait(10)
        woken.clear()
        wake_file.wake_file(database).unlink()  # an admin tidying GPUQ_HOME
        poke_from_another_process(database)
        assert woken.wait(10), "a poke after the file was made anew did not wake"
    finally:
        watching.stop()


def test_commits_beside_it_do_not_wake_the_scheduler(tmp_path):
    db = Database.open(f"sqlite:///{tmp_path / 'gpuq.db'}")
    migrate.upgrade(db)
    woken = threading.Event()
    assert db.file is not None
    watching = wake_file.watch(db.file, woken.set)
    assert watching is not None
    try:
        for name in ("ana", "bo", "cy"):
            add_user(db, name)
        assert not woken.wait(1), "a commit woke the scheduler as a poke would"
    finally:
        watching.stop()
        db.dispose()
