"""What people watch while a job trains: the event stream, `gpuq watch`, long polls."""

import subprocess
import threading
import time

import httpx
import pytest

from tests.conftest import command_spec
from tests.e2e.conftest import EPOCHS
from tests.e2e.server import GPUQ, Server
from tests.e2e.sse import read_events

pytestmark = pytest.mark.e2e


def test_the_event_stream_shows_each_state_and_the_progress_in_order(trained):
    mine = [e for e in trained.events if e["data"]["id"] == trained.job["id"]]
    assert all(e["event"] == "job" for e in mine)
    ids = [e["id"] for e in mine]
    assert ids == sorted(ids) and len(set(ids)) == len(ids), "event ids are increasing revisions"
    statuses = [e["data"]["status"] for e in mine]
    firsts = [s for i, s in enumerate(statuses) if i == 0 or statuses[i - 1] != s]
    assert firsts == ["queued", "starting", "running", "succeeded"]
    epochs = [e["data"]["progress"]["epoch"] for e in mine if e["data"]["status"] == "running"]
    assert set(range(1, EPOCHS + 1)) <= set(epochs), "progress arrives epoch by epoch"
    assert epochs == sorted(epochs)
    last = mine[-1]["data"]
    assert last["progress"]["fraction"] == 1.0 and last["num_replicas"] == 2
    assert last["revision"] == mine[-1]["id"] == trained.job["revision"]


def test_since_replays_each_changed_job_once_with_its_latest_state(trained):
    url = f"{trained.server.url}/v1/events"
    with httpx.Client(timeout=30) as client:
        replay = read_events(client, url, since=0, job_id=trained.job["id"])
        first = next(replay)
    assert first["data"]["status"] == "succeeded"
    assert first["id"] == trained.job["revision"]


def test_a_last_event_id_that_is_no_revision_is_ignored(trained):
    url = f"{trained.server.url}/v1/events"
    with httpx.Client(timeout=30) as client:
        for said in (b"\xb9", b"abc"):  # "\xb9" is '¹' in Latin-1, a digit to str.isdigit()
            with client.stream("GET", url, headers={"Last-Event-ID": said}) as response:
                assert response.status_code == 200  # the stream from now on (a 500 once)


def test_a_bad_event_filter_is_422_naming_it(trained):
    for query, field in (("since=-1", "since"), ("job_id=x", "job_id"), ("since=1.5", "since")):
        response = httpx.get(f"{trained.server.url}/v1/events?{query}")
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"][:2] == ["query", field]


def test_watch_draws_progress_and_ends_with_the_final_state(trained):
    lines = trained.watch_output.splitlines()
    assert trained.watch_code == 0, trained.watch_output
    assert any("running [" in line and f"epoch {EPOCHS}/{EPOCHS}" in line for line in lines)
    assert any("samples/s" in line and "loss=" in line for line in lines)
    assert lines[-1] == f"job {trained.job['id']} succeeded [exit code 0]"


def test_watch_exits_1_with_the_reason_when_the_job_fails(trained):
    spec = command_spec("print('bad data'); raise SystemExit(3)", gpus=0)
    job_id = httpx.post(f"{trained.server.url}/v1/jobs", json=spec).json()["id"]
    done = subprocess.run(
        [*GPUQ, "watch", str(job_id)],
        env=trained.server.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert f"job {job_id} failed (nonzero_exit)" in done.stdout
    assert "[exit code 3]" in done.stdout and "  bad data" in done.stdout


def test_a_long_poll_on_another_api_process_sees_the_schedulers_change(trained):
    other = Server(trained.server.home)
    other.start("--api-only")
    try:
        spec = command_spec("import time; time.sleep(1)", gpus=0)
        job = httpx.post(f"{other.url}/v1/jobs", json=spec).json()
        answer: dict = {}

        def poll() -> None:
            began = time.monotonic()
            url = f"{other.url}/v1/jobs/{job['id']}"
            params = {"wait_s": 30, "since": job["revision"]}
            answer["job"] = httpx.get(url, params=params, timeout=60).json()
            answer["took_s"] = time.monotonic() - began

        poller = threading.Thread(target=poll)
        poller.start()
        poller.join(timeout=40)
        # The API-only process made no change itself; it saw the scheduler's by polling.
        assert answer["job"]["status"] != "queued"
        assert answer["job"]["revision"] > job["revision"]
        assert answer["took_s"] < 5
    finally:
        other.kill()


def test_a_job_stored_by_another_api_process_starts_before_the_schedulers_poll(tmp_path):
    """On SQLite the `--api-only` process wakes the scheduler (`gpuq.db-wake`), which
    would otherwise find the job at its next poll, here a minute away; that process's long
    poll hears the scheduler's commits in turn (the database's write-ahead log)."""
    server = Server(tmp_path / "gpuq")
    server.env["GPUQ_IDLE_POLL_S"] = "60"
    server.start()
    other = Server(server.home)
    try:
        other.start("--api-only")
        job = httpx.post(f"{other.url}/v1/jobs", json=command_spec("pass", gpus=0)).json()
        began = time.monotonic()
        url = f"{other.url}/v1/jobs/{job['id']}"
        while job["status"] not in {"succeeded", "failed", "cancelled", "timed_out"}:
            params = {"wait_s": 50, "since": job["revision"]}
            job = httpx.get(url, params=params, timeout=60).json()
        assert job["status"] == "succeeded", job
        assert time.monotonic() - began < 30, "the job waited for the scheduler's poll"
    finally:
        if other.proc is not None:
            other.kill()
        server.kill()


def test_a_server_stops_promptly_with_an_event_stream_open(tmp_path):
    server = Server(tmp_path / "gpuq")
    server.start("--api-only")
    opened = threading.Event()

    def listen() -> None:
        with httpx.Client(timeout=60) as client:
            try:
                for _ in read_events(client, f"{server.url}/v1/events", opened=opened):
                    pass
            except httpx.HTTPError:
                pass  # the server went away: what a client sees

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    assert opened.wait(10)
    began = time.monotonic()
    server.kill()  # SIGTERM
    assert time.monotonic() - began < 10
    listener.join(timeout=10)
    assert not listener.is_alive(), "the stream did not end with the server"


def test_the_log_pages_by_byte_offset_and_tail(trained):
    url = f"{trained.server.url}/v1/jobs/{trained.job['id']}/logs"
    whole = httpx.get(url)
    size = len(whole.content)
    assert int(whole.headers["x-next-offset"]) == size > 100
    page = httpx.get(url, params={"offset": 100})
    assert page.content == whole.content[100:]
    assert int(page.headers["x-next-offset"]) == size
    end = httpx.get(url, params={"offset": size})
    assert (end.content, end.headers["x-next-offset"]) == (b"", str(size))
    tail = httpx.get(url, params={"tail": 2})
    assert tail.text.splitlines() == whole.text.splitlines()[-2:]
    assert int(tail.headers["x-next-offset"]) == size
