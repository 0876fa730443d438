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
    watching = wake_file.on_poke(database, woken.set)
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


def test_an_api_only_processes_commits_wake_the_scheduler_and_its_own_do_not(tmp_path):
    url = f"sqlite:///{tmp_path / 'gpuq.db'}"
    scheduling, api_only = Database.open(url), Database.open(url, api_only=True)
    try:
        migrate.upgrade(scheduling)
        woken = threading.Event()
        scheduling.wake_on_api_commits(woken.set)
        for name in ("ana", "bo", "cy"):
            add_user(scheduling, name)
        assert not woken.wait(1), "the scheduling process's own commit woke its scheduler"
        add_user(api_only, "dee")
        assert woken.wait(10), "the --api-only process's commit did not wake the scheduler"
    finally:
        api_only.dispose()
        scheduling.dispose()
