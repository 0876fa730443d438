"""Several `gpuq serve` processes on one PostgreSQL, each with a state directory of its own
(as on separate hosts): two API-only processes see each other's and the scheduler's
changes at once (LISTEN/NOTIFY), and a second scheduler is refused (an advisory lock)."""

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from service.settings import Settings
from tests.conftest import command_spec
from tests.e2e.server import GPUQ, Server

pytestmark = [pytest.mark.e2e, pytest.mark.backends("postgres")]


@pytest.fixture
def servers(settings: Settings, tmp_path: Path) -> Iterator[dict[str, Server]]:
    started: dict[str, Server] = {}
    for name in ("a", "b", "scheduler"):
        started[name] = Server(tmp_path / name / "gpuq", settings.database_url)
        (tmp_path / name).mkdir()
    try:
        yield started
    finally:
        for server in started.values():
            if server.proc and server.proc.poll() is None:
                server.kill()


def listeners(settings: Settings) -> int:
    """Sessions listening for changes to the test's database (one per process)."""
    url = settings.db_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url, autocommit=True) as conn:
        query = (
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'gpuq change listener'"
        )
        return conn.execute(query).fetchone()[0]


def long_poll(server: Server, job: dict, answer: dict) -> threading.Thread:
    """A long poll on `server` for `job` to change past its revision, in a thread."""

    def poll() -> None:
        url = f"{server.url}/v1/jobs/{job['id']}"
        params = {"wait_s": 30, "since": job["revision"]}
        answer["job"] = httpx.get(url, params=params, timeout=60).json()
        answer["at"] = time.monotonic()

    poller = threading.Thread(target=poll)
    poller.start()
    return poller


def test_api_processes_and_a_scheduler_share_one_postgresql(servers, settings):
    a, b, scheduler = servers["a"], servers["b"], servers["scheduler"]
    a.start("--api-only")
    b.start("--api-only")
    spec = command_spec("import time; time.sleep(1)", gpus=0)
    job = httpx.post(f"{a.url}/v1/jobs", json=spec).json()
    assert httpx.get(f"{b.url}/v1/jobs/{job['id']}").json() == job

    # A change through A wakes a long poll on B at once. Listening, B looks at the
    # database by itself only every few seconds: the notice is what wakes it.
    assert listeners(settings) == 2
    for action in ("hold", "release", "hold"):
        answer: dict = {}
        poller = long_poll(b, job, answer)
        time.sleep(0.5)
        assert poller.is_alive(), "the long poll answered before anything changed"
        changed = httpx.post(f"{a.url}/v1/jobs/{job['id']}/{action}").json()
        changed_at = time.monotonic()
        poller.join(timeout=10)
        assert answer["job"] == changed
        assert answer["at"] - changed_at < 0.5, f"B answered {action} late"
        job = changed

    # The scheduler process (a third state directory) starts it; B sees that too.
    httpx.post(f"{a.url}/v1/jobs/{job['id']}/release")
    job = httpx.get(f"{b.url}/v1/jobs/{job['id']}").json()
    answer = {}
    poller = long_poll(b, job, answer)
    scheduler.start()
    poller.join(timeout=30)
    assert answer["job"]["status"] in {"starting", "running", "succeeded"}
    assert scheduler.wait(job["id"], {"succeeded"})["status"] == "succeeded"
    assert httpx.get(f"{b.url}/v1/jobs/{job['id']}").json()["status"] == "succeeded"

    # A second scheduler, with no state directory in common, is refused by the database.
    second = Server(settings.home, settings.database_url)
    refused = subprocess.run(
        [*GPUQ, "serve"], env=second.env, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 1
    assert "another gpuq serve is already scheduling jobs from this PostgreSQL database" in (
        refused.stderr
    )

    # A scheduler killed outright frees the lock with its session: another takes over.
    scheduler.kill(9)
    second.start()
    job = httpx.post(f"{b.url}/v1/jobs", json=spec).json()
    assert second.wait(job["id"], {"succeeded"})["status"] == "succeeded"
    second.kill()


def test_a_job_stored_by_an_api_process_starts_before_the_schedulers_poll(servers):
    """The --api-only process's notice wakes the scheduler, which would otherwise find the
    job at its next poll, here a minute away."""
    a, scheduler = servers["a"], servers["scheduler"]
    scheduler.env["GPUQ_IDLE_POLL_S"] = "60"
    scheduler.start()
    a.start("--api-only")
    time.sleep(1)  # the scheduler's first, idle step is over: only a wake starts the job
    job = httpx.post(f"{a.url}/v1/jobs", json=command_spec("pass", gpus=0)).json()
    assert scheduler.wait(job["id"], {"succeeded"}, timeout_s=30)["status"] == "succeeded"
