"""Holds, dependencies and queue positions through the running scheduler."""

import pytest

from tests.conftest import command_spec, ended, wait_for

pytestmark = pytest.mark.e2e
SLEEP = "import time; time.sleep({})"


def submit(client, spec, **extra) -> int:
    response = client.post("/v1/jobs", json={**spec, **extra})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def test_queued_jobs_show_their_position_and_why_they_wait(client):
    first = submit(client, command_spec(SLEEP.format(3), gpu_ids=[0]))
    second = submit(client, command_spec(SLEEP.format(0), gpu_ids=[0]))
    third = submit(client, command_spec(SLEEP.format(0), gpu_ids=[0]), time_limit_s=5)
    wait_for(client, first, lambda j: j["status"] == "running")
    job2 = wait_for(client, second, lambda j: j["queue_position"] is not None)
    job3 = wait_for(client, third, lambda j: j["queue_position"] is not None)
    assert (job2["queue_position"], job3["queue_position"]) == (1, 2)
    assert job2["wait_reason"] == f"waiting for GPUs 0 whole; GPU 0 is held whole by job {first}"
    assert job3["wait_reason"] == (f"waiting behind job {second}, which starts first")
    done = [wait_for(client, i, ended) for i in (first, second, third)]
    assert [j["status"] for j in done] == ["succeeded"] * 3
    assert all(j["queue_position"] is None for j in done)


def test_a_held_job_waits_until_released(client):
    busy = submit(client, command_spec(SLEEP.format(1.5), gpu_ids=[0]))
    job_id = submit(client, command_spec(SLEEP.format(0), gpu_ids=[0]))
    assert client.post(f"/v1/jobs/{job_id}/hold").json()["held"] is True
    assert wait_for(client, busy, ended)["status"] == "succeeded"
    job = wait_for(client, job_id, lambda j: (j["wait_reason"] or "").startswith("held"))
    assert job["wait_reason"] == f"held: `POST /v1/jobs/{job_id}/release` lets it start"
    assert job["status"] == "queued"
    assert client.get("/v1/gpus").json()[0]["state"] == "free", "held, not placed"
    client.post(f"/v1/jobs/{job_id}/release")
    assert wait_for(client, job_id, ended)["status"] == "succeeded"


def test_a_job_starts_after_its_dependency_succeeds_and_is_cancelled_if_one_fails(client):
    good = submit(client, command_spec(SLEEP.format(1.5), gpus=0))
    bad = submit(client, command_spec("raise SystemExit(2)", gpus=0))
    after_good = submit(client, command_spec(SLEEP.format(0), gpus=0), depends_on=[good])
    after_both = submit(client, command_spec(SLEEP.format(0), gpus=0), depends_on=[good, bad])

    waiting = wait_for(client, after_good, lambda j: j["wait_reason"] is not None)
    assert waiting["wait_reason"] in (
        f"waiting for job {good} to succeed (it is starting)",
        f"waiting for job {good} to succeed (it is running)",
    )
    doomed = wait_for(client, after_both, ended)
    assert (doomed["status"], doomed["reason"]) == ("cancelled", "dependency_failed")
    assert doomed["message"] == (
        f"will never start: it depends on job {bad}, which ended failed (nonzero_exit)"
    )
    done = wait_for(client, after_good, ended)
    assert done["status"] == "succeeded"
    assert done["started_at"] >= client.get(f"/v1/jobs/{good}").json()["finished_at"]
