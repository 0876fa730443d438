"""A throwaway PostgreSQL for the tests, and a fresh database in it per test.

Debian's server programs make a cluster with `initdb` in a temporary directory (as the
`postgres` user when the tests run as root, since PostgreSQL refuses to), which listens
on 127.0.0.1 at a free port, trusts loopback connections, and goes away with the session.
Missing programs fail the tests rather than skip them: `make test` installs Debian's
`postgresql`.
"""

import contextlib
import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg

from service.store import migrate
from service.store.db import Database
from tests.e2e.server import free_port

#: What a throwaway cluster may skip (it is not meant to survive a crash of the machine);
#: no autovacuum, whose visits to the template make CREATE DATABASE wait; and room for
#: several servers' pools at once.
SERVER_SETTINGS = """
listen_addresses = '127.0.0.1'
fsync = off
synchronous_commit = off
full_page_writes = off
autovacuum = off
max_connections = 500
"""
INITDB_OPTIONS = ["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"]
TEMPLATE = "gpuq_migrated"
#: Free memory /dev/shm needs to hold the cluster: a few databases at a time, as used ones
#: are dropped.
SHM_NEEDED = 1 << 30


def server_programs() -> Path:
    """The directory of `initdb`, `pg_ctl` and `postgres` (Debian keeps them off PATH)."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if found:
        return found[-1].parent
    if shutil.which("pg_config"):
        bindir = subprocess.run(
            ["pg_config", "--bindir"], capture_output=True, text=True, check=True
        ).stdout.strip()
        if (Path(bindir) / "initdb").exists():
            return Path(bindir)
    if initdb := shutil.which("initdb"):
        return Path(initdb).parent
    raise RuntimeError(
        "PostgreSQL's server programs (initdb, pg_ctl) are not installed; `make test` "
        "installs Debian's postgresql package"
    )


class Cluster:
    def __init__(self, root: Path, programs: Path) -> None:
        self.root = root  #: data directory, socket and log; readable by the server's user
        self.programs = programs
        self.port = 0
        self._names = itertools.count(1)
        self._as_server_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        #: Drops used databases meanwhile: DROP waits for the test's sessions to exit.
        self._dropper = ThreadPoolExecutor(1, thread_name_prefix="drop-test-database")

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def init(self) -> None:
        if self._as_server_user:
            shutil.chown(self.root, "postgres")
        self._run("initdb", "-D", str(self.data), *INITDB_OPTIONS)
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(SERVER_SETTINGS + f"unix_socket_directories = '{self.root}'\n")

    def start(self) -> None:
        for _ in range(3):  # the free port may be taken before the server binds it
            self.port = free_port()
            options = ["-l", str(self.root / "log"), "-o", f"-p {self.port}", "-w", "-t", "60"]
            done = self._run("pg_ctl", "-D", str(self.data), *options, "start", check=False)
            if done.returncode == 0:
                return
        log = (self.root / "log").read_text(errors="replace")
        raise RuntimeError(f"the test PostgreSQL did not start:\n{done.stdout}\n{log[-3000:]}")

    def stop(self) -> None:
        self._dropper.shutdown(cancel_futures=True)
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)

    def admin(self) -> "psycopg.Connection[tuple]":
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True
        )

    def migrate_template(self) -> None:
        """A migrated database that each test's database copies (faster than migrating)."""
        with self.admin() as conn:
            conn.execute(f"CREATE DATABASE {TEMPLATE}")
        db = Database.open(self.url(TEMPLATE))
        try:
            migrate.upgrade(db)
        finally:
            db.dispose()

    @contextlib.contextmanager
    def database(self) -> Iterator[str]:
        """A new migrated database's URL, dropped afterwards with every connection to it."""
        name = f"test_{next(self._names)}"
        with self.admin() as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE} STRATEGY FILE_COPY")
        try:
            yield self.url(name)
        finally:
            self._dropper.submit(self._drop, name)

    def _drop(self, name: str) -> None:
        with self.admin() as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")

    def _run(self, program: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*self._as_server_user, str(self.programs / program), *args],
            capture_output=True,
            text=True,
            check=check,
            timeout=120,
        )


def scratch() -> str | None:
    """Memory (/dev/shm) where it has room, since the cluster writes a lot and keeps
    nothing (CREATE DATABASE alone takes ten times longer on a slow disk); else the
    default temporary directory. Either keeps the socket's path short enough."""
    shm = Path("/dev/shm")
    if shm.is_dir() and shutil.disk_usage(shm).free >= SHM_NEEDED:
        return str(shm)
    return None


@contextlib.contextmanager
def running_cluster() -> Iterator[Cluster]:
    """A started cluster with the migrated template, removed afterwards."""
    programs = server_programs()
    root = Path(tempfile.mkdtemp(prefix="gpuq-pg-", dir=scratch()))
    cluster = Cluster(root, programs)
    try:
        cluster.init()
        cluster.start()
        cluster.migrate_template()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
