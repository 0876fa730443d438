"""`GET /v1/jobs/{id}?wait_s=...`: answers when the job changes, or when the wait is over."""

import threading
import time

import pytest

from tests.conftest import job_spec

pytestmark = pytest.mark.backends("sqlite", "postgres")


def test_a_long_poll_answers_as_soon_as_the_job_changes(api):
    job = api.post("/v1/jobs", json=job_spec()).json()
    answer: dict = {}

    def poll() -> None:
        began = time.monotonic()
        answer["job"] = api.get("/v1/jobs/1", params={"wait_s": 20}).json()
        answer["took_s"] = time.monotonic() - began

    poller = threading.Thread(target=poll)
    poller.start()
    time.sleep(0.5)
    assert poller.is_alive(), "answered before anything changed"
    api.post("/v1/jobs/1/hold")
    poller.join(timeout=10)
    assert answer["job"]["held"] is True
    assert answer["job"]["revision"] > job["revision"]
    assert 0.5 <= answer["took_s"] < 2


def test_a_long_poll_with_nothing_changing_answers_after_wait_s_unchanged(api):
    job = api.post("/v1/jobs", json=job_spec()).json()
    began = time.monotonic()
    same = api.get("/v1/jobs/1", params={"wait_s": 0.6}).json()
    assert 0.6 <= time.monotonic() - began < 2
    assert same == job


def test_since_an_older_revision_answers_at_once(api):
    first = api.post("/v1/jobs", json=job_spec()).json()
    held = api.post("/v1/jobs/1/hold").json()
    began = time.monotonic()
    job = api.get("/v1/jobs/1", params={"wait_s": 20, "since": first["revision"]}).json()
    assert time.monotonic() - began < 1
    assert job["revision"] == held["revision"] > first["revision"]


def test_an_ended_job_answers_at_once_since_it_never_changes_again(api):
    api.post("/v1/jobs", json=job_spec())
    api.post("/v1/jobs/1/cancel")
    began = time.monotonic()
    assert api.get("/v1/jobs/1", params={"wait_s": 20}).json()["status"] == "cancelled"
    assert time.monotonic() - began < 1


def test_every_change_to_any_job_raises_its_revision_above_all_others(api):
    a = api.post("/v1/jobs", json=job_spec()).json()
    b = api.post("/v1/jobs", json=job_spec()).json()
    assert b["revision"] > a["revision"]
    a_again = api.patch("/v1/jobs/1", json={"priority": -1}).json()
    assert a_again["revision"] > b["revision"]


def test_bad_wait_parameters_are_422_naming_them(api):
    api.post("/v1/jobs", json=job_spec())
    for query, field in (("wait_s=-1", "wait_s"), ("wait_s=301", "wait_s"), ("since=x", "since")):
        response = api.get(f"/v1/jobs/1?{query}")
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"] == ["query", field]
    assert api.get("/v1/jobs/99?wait_s=5").status_code == 404
