"""Many writers at once, replays, and submissions that survive a `kill -9` of the server
(submissions share commits: `jobs.group_commit`)."""

import contextlib
import multiprocessing
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from gpuq.contract.states import JobStatus
from service import jobs
from service.scheduler.starting import CRASH_AFTER_CLAIM
from service.settings import Settings
from service.store.db import Database
from tests.conftest import job_spec
from tests.e2e.server import Server

pytestmark = [pytest.mark.e2e, pytest.mark.backends("sqlite", "postgres")]


@pytest.fixture
def api_server(settings: Settings, request: pytest.FixtureRequest) -> Iterator[Server]:
    """An API-only server: submissions are stored but nothing is scheduled. Parametrize
    indirectly with a dict for more environment."""
    server = Server(settings.home, settings.database_url)
    server.env.update(getattr(request, "param", {}))
    server.start("--api-only")
    yield server
    if server.proc and server.proc.poll() is None:
        server.kill()


def all_jobs(url: str) -> list[dict]:
    found, cursor = [], None
    while True:
        params = {"limit": 500, **({"cursor": cursor} if cursor else {})}
        page = httpx.get(f"{url}/v1/jobs", params=params).json()
        found += page["jobs"]
        if not (cursor := page["next_cursor"]):
            return found


def test_a_thousand_concurrent_submissions_from_twenty_clients(api_server):
    def client_work(n: int) -> list[int]:
        with httpx.Client(base_url=api_server.url, timeout=60) as http:
            codes = []
            for i in range(50):
                body = job_spec(name=f"c{n}-{i}")
                codes.append(http.post("/v1/jobs", json=body).status_code)
            return codes

    with ThreadPoolExecutor(20) as pool:
        codes = [c for batch in pool.map(client_work, range(20)) for c in batch]
    assert codes == [201] * 1000
    stored = all_jobs(api_server.url)
    assert len(stored) == 1000
    assert {j["name"] for j in stored} == {f"c{n}-{i}" for n in range(20) for i in range(50)}


def test_concurrent_replays_of_one_key_make_one_job(api_server):
    def replay(_: int) -> tuple[int, int]:
        response = httpx.post(
            f"{api_server.url}/v1/jobs", json=job_spec(), headers={"Idempotency-Key": "same"}
        )
        return response.status_code, response.json()["id"]

    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(replay, range(40)))
    assert sorted(code for code, _ in results) == [200] * 39 + [201]
    assert len({job_id for _, job_id in results}) == 1


def write_jobs(api: str, url: str, count: int) -> int:
    """Runs in its own process: submits jobs (as everyone does: over HTTP) and moves them
    through their states, writing to the database itself as a scheduler does."""
    db = Database.open(url)
    for _ in range(count):
        job_id = httpx.post(f"{api}/v1/jobs", json=job_spec(name="written")).json()["id"]
        with db.write() as session:
            jobs.transition(session, job_id, JobStatus.starting, attempt=1)
        with db.write() as session:
            jobs.transition(session, job_id, JobStatus.succeeded)
    db.dispose()
    return count


def test_several_writer_processes_and_the_server_never_see_a_locked_database(api_server):
    url = api_server.db_url
    context = multiprocessing.get_context("spawn")
    with context.Pool(4) as pool:
        pending = pool.starmap_async(write_jobs, [(api_server.url, url, 100)] * 4)
        codes = [
            httpx.post(f"{api_server.url}/v1/jobs", json=job_spec()).status_code for _ in range(100)
        ]
        assert pending.get(timeout=120) == [100] * 4
    assert codes == [201] * 100
    stored = all_jobs(api_server.url)
    assert len(stored) == 500
    assert sum(j["status"] == "succeeded" for j in stored) == 400


def test_acknowledged_submissions_survive_kill_9_of_the_server(api_server):
    acknowledged = []
    for i in range(30):
        response = httpx.post(f"{api_server.url}/v1/jobs", json=job_spec(name=f"k{i}"))
        assert response.status_code == 201
        acknowledged.append(response.json()["id"])
    api_server.kill(signal.SIGKILL)
    api_server.start("--api-only")
    stored = {j["id"]: j["name"] for j in all_jobs(api_server.url)}
    assert stored == {job_id: f"k{i}" for i, job_id in enumerate(acknowledged)}


@pytest.mark.parametrize("api_server", [{"GPUQ_MAX_JOBS_QUEUED": "25"}], indirect=True)
def test_concurrent_submissions_each_get_their_own_answer(api_server):
    """However they are batched: the quota admits exactly its number, a bad dependency is
    refused alone, and each answer is the job as stored."""

    def post(body: dict) -> httpx.Response:
        return httpx.post(f"{api_server.url}/v1/jobs", json=body, timeout=60)

    bodies = [job_spec(name=f"q{i}") for i in range(40)]
    bodies[7] = job_spec(name="lost", depends_on=[99999])
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(post, bodies))
    codes = [a.status_code for a in answers]
    assert sorted(codes) == [201] * 25 + [422] + [429] * 14
    assert answers[7].json()["detail"][0]["loc"] == ["body", "depends_on", 0]
    for answer in answers:
        if answer.status_code == 201:
            job = answer.json()
            assert httpx.get(f"{api_server.url}/v1/jobs/{job['id']}").json() == job
        elif answer.status_code == 429:
            assert "max_jobs_queued=25" in answer.json()["detail"]
    assert len(all_jobs(api_server.url)) == 25


def test_acknowledged_concurrent_submissions_survive_kill_9_mid_stream(api_server):
    """Four clients submit without pause; the server is killed while requests are in
    flight. Every job answered 201 is there after a restart."""
    acknowledged: dict[int, str] = {}
    refused: list[str] = []
    lock = threading.Lock()

    def client_work(n: int) -> None:
        with httpx.Client(base_url=api_server.url, timeout=30) as http:
            for i in range(10_000):
                name = f"c{n}-{i}"
                try:
                    response = http.post("/v1/jobs", json=job_spec(name=name))
                except httpx.TransportError:
                    return  # killed: this one may or may not be stored
                with lock:
                    if response.status_code != 201:
                        refused.append(response.text)
                        return
                    acknowledged[response.json()["id"]] = name

    clients = [threading.Thread(target=client_work, args=(n,)) for n in range(4)]
    for client in clients:
        client.start()
    while len(acknowledged) < 120 and all(c.is_alive() for c in clients):
        time.sleep(0.005)
    api_server.kill(signal.SIGKILL)
    for client in clients:
        client.join(60)
    api_server.start("--api-only")
    stored = {j["id"]: j["name"] for j in all_jobs(api_server.url)}
    assert not refused and len(acknowledged) >= 120
    assert {job_id: stored.get(job_id) for job_id in acknowledged} == acknowledged


# The launch path: a job is launched after the commit that claimed it, outside the write lock.


@pytest.fixture
def full_server(settings: Settings, request: pytest.FixtureRequest) -> Iterator[Server]:
    """A server that schedules and runs what it accepts (`gpus: 0` jobs, two at once).
    Parametrize indirectly with a dict for more environment."""
    server = Server(settings.home, settings.database_url)
    server.env.update(getattr(request, "param", {}))
    server.start()
    yield server
    if server.proc and server.proc.poll() is None:
        server.kill()


def writes_its_id(path: Path, name: str) -> dict:
    """A trivial job that appends its job id to `path`: the lines tell how often it ran."""
    argv = ["/bin/sh", "-c", f'echo "$GPUQ_JOB_ID" >> {path}']
    return {"name": name, "kind": "command", "command": {"argv": argv}, "resources": {"gpus": 0}}


def ran(path: Path) -> list[int]:
    return sorted(int(line) for line in path.read_text().split()) if path.exists() else []


@pytest.mark.parametrize(
    "full_server", [{CRASH_AFTER_CLAIM: "1", "GPUQ_WARM_WORKERS": "0"}], indirect=True
)
def test_a_crash_between_the_claims_commit_and_the_launch_loses_nothing(full_server, tmp_path):
    marker = tmp_path / "ran"
    spec, key = writes_its_id(marker, "once"), {"Idempotency-Key": "crash-after-claim"}
    # The claim can commit, and gpuq die, before the answer leaves: the key tells later.
    with contextlib.suppress(httpx.TransportError):
        httpx.post(f"{full_server.url}/v1/jobs", json=spec, headers=key)
    assert full_server.proc is not None
    assert full_server.proc.wait(timeout=30) == -signal.SIGKILL  # it crashed at that moment
    assert ran(marker) == []  # nothing was launched
    runs = full_server.home / "runs"
    assert not [run for run in runs.glob("*") if run.name.isdigit()]  # no job's run folder
    del full_server.env[CRASH_AFTER_CLAIM]
    full_server.start()
    # Stored before the crash: the same key gives that job back, not a new one.
    again = httpx.post(f"{full_server.url}/v1/jobs", json=spec, headers=key)
    assert again.status_code == 200, again.text
    job_id = again.json()["id"]
    job = full_server.wait(job_id, {"succeeded", "failed", "cancelled"}, timeout_s=60)
    assert (job["status"], job["attempt"], job["previous_attempts"]) == ("succeeded", 1, [])
    assert ran(marker) == [job_id]
    assert (
        "claimed for attempt 1 but never launched"
        in (full_server.home.parent / "serve.log").read_text()
    )


def test_every_acknowledged_job_runs_once_after_kill_9_mid_burst(full_server, tmp_path):
    """Four clients submit trivial jobs that the server is claiming and launching as they
    come; it is killed mid-stream and started again. Every job answered 201 runs exactly
    once: none lost in a claim that was never launched, none started twice."""
    marker = tmp_path / "ran"
    acknowledged: list[int] = []
    lock = threading.Lock()

    def client_work(n: int) -> None:
        with httpx.Client(base_url=full_server.url, timeout=30) as http:
            for i in range(10_000):
                try:
                    response = http.post("/v1/jobs", json=writes_its_id(marker, f"c{n}-{i}"))
                except httpx.TransportError:
                    return  # killed: this one may or may not be stored
                assert response.status_code == 201, response.text
                with lock:
                    acknowledged.append(response.json()["id"])

    clients = [threading.Thread(target=client_work, args=(n,)) for n in range(4)]
    for client in clients:
        client.start()
    # Killed once jobs are running: some ended, some launched, some only claimed.
    while len(ran(marker)) < 10 and all(c.is_alive() for c in clients):
        time.sleep(0.005)
    full_server.kill(signal.SIGKILL)
    for client in clients:
        client.join(60)
    assert len(acknowledged) >= 10
    full_server.start()
    deadline = time.monotonic() + 120
    while {j["status"] for j in all_jobs(full_server.url)} - {"succeeded"}:
        assert time.monotonic() < deadline, "the jobs never all ended"
        time.sleep(0.2)
    stored = all_jobs(full_server.url)
    assert set(acknowledged) <= {j["id"] for j in stored}
    assert ran(marker) == sorted(j["id"] for j in stored)  # each exactly once
    assert all(j["attempt"] == 1 for j in stored)
