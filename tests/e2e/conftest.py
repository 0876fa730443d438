"""One real server with one finished 2-replica job, watched live while it trained.

Training is the slow part of an end-to-end test (TensorFlow's start-up), so the tests of
what people watch (events, `gpuq watch`, artifacts, TensorBoard logs, the dashboard)
share this one job.
"""

import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.conftest import TINY_KERAS, job_spec
from tests.e2e.server import GPUQ, Server
from tests.e2e.sse import read_events

EPOCHS = 3
#: Enough samples that an epoch outlasts the progress callback's 1 s step interval: a step
#: event is reported inside every epoch, well apart from the epoch's end. (With epochs
#: under a second, an epoch's end and the next epoch's first step reach the scheduler in
#: one read of events.jsonl, and the job's row, so the event stream, skips that epoch.)
SAMPLES = 49152


@dataclass
class Trained:
    server: Server
    job: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)
    watch_output: str = ""
    watch_code: int | None = None


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Trained]:
    server = Server(tmp_path_factory.mktemp("trained") / "gpuq")
    server.start()
    events: list[dict[str, Any]] = []
    stream = httpx.Client(timeout=120)
    opened = threading.Event()

    def listen() -> None:
        for event in read_events(stream, f"{server.url}/v1/events", opened=opened):
            events.append(event)
            if event["data"]["status"] == "succeeded":
                return

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    assert opened.wait(10), "the event stream did not open"
    keras = {
        "epochs": EPOCHS,
        "validation_split": 0.25,
        "data": {**TINY_KERAS["data"], "samples": SAMPLES},
    }
    spec = job_spec(name="watched", keras=keras, resources={"gpus": 2})
    job_id = httpx.post(f"{server.url}/v1/jobs", json=spec).json()["id"]
    watch = subprocess.run(
        [*GPUQ, "watch", str(job_id)], env=server.env, capture_output=True, text=True, timeout=180
    )
    listener.join(timeout=30)
    stream.close()
    job = server.job(job_id)
    assert job["status"] == "succeeded", job
    yield Trained(server, job, events, watch.stdout + watch.stderr, watch.returncode)
    server.kill()
