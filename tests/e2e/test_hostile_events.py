"""A job's events cannot hurt anyone else: a command job that writes lines meant to break
the scheduler or the job list, beside another that trains as it should (a real service,
real runners, simulated GPUs)."""

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from tests.conftest import command_spec, ended
from tests.service.scheduler.test_ingest import HOSTILE

#: Appends the lines of the file it is given to its events in one write, then sleeps.
APPEND_THEN_SLEEP = """
import os, sys, time
with open(os.environ["GPUQ_EVENTS"], "ab") as events:
    events.write(open(sys.argv[1], "rb").read())
time.sleep(float(sys.argv[2]))
"""

EPOCH = {"event": "epoch", "epoch": 1, "metrics": {"loss": 0.5}, "progress": {"epoch": 1}}

#: A job that trains as it should: reports its epoch, as gpuq's Keras callback writes it.
REPORTS_AN_EPOCH = """
import json, os
with open(os.environ["GPUQ_EVENTS"], "a") as events:
    events.write(json.dumps({"event": "epoch", "epoch": 1, "step": 4, "ts": 1.5,
                             "metrics": {"loss": 0.25}, "progress": {"epoch": 1}}) + "\\n")
"""


def appender(lines: list[Any], tmp_path, name: str, sleep_s: float) -> dict[str, Any]:
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + "[" * 100_000 + "\n")
    spec = command_spec(APPEND_THEN_SLEEP)
    spec["command"]["argv"] += [str(path), str(sleep_s)]
    return {**spec, "name": name}


def watch(client, job_id: int, until: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Polls the job until `until(job)` holds, and the whole list of jobs all the while."""
    deadline = time.monotonic() + 30
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        listed = client.get("/v1/jobs")
        assert listed.status_code == 200, listed.text
        job = client.get(f"/v1/jobs/{job_id}").json()
        if until(job):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not get there in 30 s; last seen: {job}")


def test_a_jobs_hostile_events_hurt_no_other_job(client, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="service.scheduler.ingest")
    spec = appender([*HOSTILE, EPOCH], tmp_path, "hostile", sleep_s=3)
    hostile = client.post("/v1/jobs", json=spec).json()["id"]
    # Its good line counts: the scheduler read past the bad ones.
    watch(client, hostile, lambda j: j["metrics"] == {"loss": 0.5})
    fine = client.post("/v1/jobs", json=command_spec(REPORTS_AN_EPOCH)).json()["id"]
    job = watch(client, fine, ended)
    assert (job["status"], job["metrics"], job["progress"]["epoch"]) == (
        "succeeded",
        {"loss": 0.25},
        1,
    )
    job = watch(client, hostile, ended)
    assert (job["status"], job["progress"]["epoch"], job["num_replicas"]) == (
        "succeeded",
        1,
        None,
    )
    warned = [r.getMessage() for r in caplog.records if r.name == "service.scheduler.ingest"]
    assert warned and all(w.startswith(f"job {hostile}: skipped ") for w in warned)
