"""Shared fixtures: a real SQLite file and state directory per test, simulated GPUs.

Tests marked `backends("sqlite", "postgres")` run once per database: each PostgreSQL run
gets a fresh database in a throwaway cluster (`tests.postgres`).
"""

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from gpuq.http import Client
from service.api.app import create_app
from service.api.local_socket import TCP_PEER
from service.cli.main import main
from service.gpus.nvml import GpuProbe
from service.runtime import open_api, open_with_scheduler
from service.settings import Settings
from service.store import migrate
from service.store.db import Database
from service.team.users import Caller
from tests import submitting
from tests.postgres import Cluster, running_cluster

ANA = Caller("ana", admin=False)
WRITER = Caller("writer", admin=False)

#: A Keras job small enough to train in a second or two once TensorFlow is up.
TINY_KERAS = {
    "model": {"builtin": "mlp", "hidden_units": [16]},
    "data": {"source": "synthetic", "samples": 256, "features": 8},
    "epochs": 2,
    "batch_size": 64,
    "metrics": ["mae"],
}


def job_spec(**overrides: Any) -> dict[str, Any]:
    """A valid tiny job spec; keyword arguments replace top-level fields."""
    spec: dict[str, Any] = {"name": "tiny", "keras": dict(TINY_KERAS), "resources": {"gpus": 1}}
    keras = overrides.pop("keras", None)
    if keras:
        spec["keras"].update(keras)
    spec.update(overrides)
    return spec


#: `make test` runs the suite in two pytest-xdist workers (`TEST_WORKERS`). A file's
#: tests run in one worker, one after another, so that its module fixtures start once; so
#: do these folders' and files' together, whose session fixtures are worth starting once:
#: a Slurm cluster, a Docker daemon and its wheels, one trained job (tests/e2e/conftest.py's
#: `trained`).
TOGETHER = {
    "tests/slurm/": "slurm",
    "tests/deploy/": "deploy",
    "tests/e2e/test_artifacts.py": "trained",
    "tests/e2e/test_dashboard.py": "trained",
    "tests/e2e/test_live_updates.py": "trained",
}


def together(nodeid: str) -> str:
    """The group of the test `nodeid`: its file's, or its `TOGETHER` group."""
    path = nodeid.split("::", 1)[0]
    return next((group for prefix, group in TOGETHER.items() if path.startswith(prefix)), path)


#: the groups that take minutes, longest first: the workers take groups in the order they
#: were collected (`pytest_xdist_make_scheduler`), so these go first rather than leave one
#: worker running them at the end while the other waits (`make test`'s `--durations`)
LONGEST = ("deploy", "tests/e2e/test_packed_soak.py", "slurm")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The `LONGEST` groups first; everything else in the order it was collected."""
    rank = {group: place for place, group in enumerate(LONGEST)}
    items.sort(key=lambda item: rank.get(together(item.nodeid), len(LONGEST)))


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: a plain `pytest` never calls it
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    # xdist's own `--dist loadgroup` does nothing under pytest 9.2: it tags each group onto
    # `item._nodeid`, which pytest no longer reads. Its scope scheduling with our scopes does.
    from xdist.scheduler import LoadScopeScheduling

    # In collection order (`LONGEST` first), not xdist's default of the groups with the
    # most tests first, which left the one-test soak, the longest, for the very end.
    config.option.loadscopereorder = False

    class Together(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return together(nodeid)

    return Together(config, log)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("backends")
    if marker is not None and "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", marker.args)


@pytest.fixture
def backend() -> str:
    """The database of `settings`: SQLite, unless the test is marked `backends(...)`."""
    return "sqlite"


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[Cluster]:
    with running_cluster() as cluster:
        yield cluster


@pytest.fixture
def database_url(backend: str, request: pytest.FixtureRequest) -> Iterator[str | None]:
    """None for SQLite in the state directory; else a fresh PostgreSQL database."""
    if backend == "sqlite":
        yield None
        return
    cluster: Cluster = request.getfixturevalue("postgres_cluster")
    with cluster.database() as url:
        yield url


@pytest.fixture
def settings(tmp_path: Path, database_url: str | None) -> Settings:
    return Settings(
        home=tmp_path / "gpuq",
        database_url=database_url,
        gpus="sim:2x8GiB",
        cancel_grace_s=10,
        active_poll_s=0.1,
        idle_poll_s=0.5,
        retry_backoff_s=0.5,
        # The suite runs as root (it installs and starts Slurm, PostgreSQL...): command jobs
        # run as root as on a single-user box; tests/e2e/test_run_as.py covers the rest.
        allow_root_jobs=True,
        # ...so every user's jobs share that account: tokens of one person, as far as the
        # tests of sharing and fair share go (tests/e2e/test_run_as.py: accounts of their own).
        allow_shared_account=True,
        # A warm worker imports TensorFlow (seconds of CPU) as each service opens: only the
        # tests of warm workers (tests/e2e/test_warm_workers.py) ask for one.
        warm_workers=0,
    )


@pytest.fixture
def db(settings: Settings) -> Iterator[Database]:
    database = Database.open(settings.db_url)
    migrate.upgrade(database)
    submitting.opened_with(database, settings)
    yield database
    submitting.closed(database)
    database.dispose()


def local_client(app: FastAPI) -> TestClient:
    """A client of `app` as a process on this machine is one, from 127.0.0.1 to `Host:
    127.0.0.1`: with no user, gpuq answers no one else (`service.api.open_mode`). It has no
    socket for the kernel to list, so the answer the kernel gives for this process's own
    connections stands in: this test's account (`local_socket.TCP_PEER`)."""
    app.add_middleware(_ThisAccount)
    return TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 50000))


class _ThisAccount:
    """What `local_socket.PeerCredentialsProtocol` puts in a TCP connection's scope."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        scope.setdefault(TCP_PEER, os.geteuid)
        await self.app(scope, receive, send)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    """The whole service: API and scheduler, which launches real workers."""
    with local_client(create_app(settings)) as test_client:
        yield test_client


@contextmanager
def serving(
    settings: Settings, *, schedule: bool = True, probe: GpuProbe | None = None
) -> Iterator[TestClient]:
    """A client of a service with its scheduler in a thread (`schedule=False`: API-only)."""
    service = (
        open_with_scheduler(settings, probe=probe) if schedule else open_api(settings, probe=probe)
    )
    submitting.served(service)
    try:
        with local_client(create_app(settings, service)) as test_client:
            yield test_client
    finally:
        submitting.unserved(service.db)
        service.close()


@pytest.fixture
def api(settings: Settings) -> Iterator[TestClient]:
    """The API alone: submitted jobs stay queued, so no worker starts."""
    with serving(settings, schedule=False) as test_client:
        yield test_client


@pytest.fixture
def gpuq(
    api: TestClient, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str, str]]:
    """Runs `gpuq ARGS...` in this process against `api`: its exit code, stdout, stderr."""

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args), api=Client(http=api))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def wait_for(
    client: TestClient,
    job_id: int,
    until: Callable[[dict[str, Any]], bool],
    timeout_s: float = 90,
) -> dict[str, Any]:
    """Polls a job until `until(job)` holds; fails with the last state seen."""
    deadline = time.monotonic() + timeout_s
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if until(job):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not get there in {timeout_s}s; last seen: {job}")


def command_spec(code: str, **resources: Any) -> dict[str, Any]:
    """A `command` job running `python -c code` with this test run's interpreter."""
    return {
        "name": "cmd",
        "kind": "command",
        "command": {"argv": [sys.executable, "-c", code]},
        "resources": resources or {"gpus": 1},
    }


def ended(job: dict[str, Any]) -> bool:
    return job["status"] in {"succeeded", "failed", "cancelled", "timed_out"}
