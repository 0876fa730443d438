"""Reservations through the running scheduler, with real command jobs on simulated GPUs
(`sim:2x8GiB`) and short windows: who waits and why, who runs in it, who backfills before
it, what its opening does to an outsider still on its GPU, and its release when idle."""

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from service.settings import Settings
from service.team.users import add_user
from tests.conftest import command_spec, ended, serving, wait_for

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).parents[2] / "examples" / "preemptible.py"
SLEEP = "import time; time.sleep({})"


def as_user(db, name: str, admin: bool = False) -> dict[str, str]:
    return {"Authorization": f"Bearer {add_user(db, name, admin=admin)}"}


def book(client, who, starts_in_s: float, duration_s: float, **body: Any) -> dict[str, Any]:
    starts = datetime.now(UTC) + timedelta(seconds=starts_in_s)
    body = {"name": "paper", "gpu_ids": [0], "users": ["ana"], **body}
    body |= {"starts_at": starts.isoformat(), "duration_s": duration_s}
    response = client.post("/v1/reservations", json=body, headers=who)
    assert response.status_code == 201, response.text
    return response.json()


def submit(client, who, spec: dict[str, Any]) -> int:
    response = client.post("/v1/jobs", json=spec, headers=who)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def job(client, who, job_id: int) -> dict[str, Any]:
    return client.get(f"/v1/jobs/{job_id}", headers=who).json()


def waiting_with(client, who, job_id: int, start: str, timeout_s: float = 30) -> dict[str, Any]:
    client.headers.update(who)
    return wait_for(client, job_id, lambda j: (j["wait_reason"] or "").startswith(start), timeout_s)


def test_outsiders_wait_or_backfill_and_members_run_in_it(settings, db):
    ana, cy = as_user(db, "ana"), as_user(db, "cy")
    with serving(settings) as client:
        # GPU 1 is busy with cy's own long job: only GPU 0, booked an hour from now, is idle.
        busy = submit(client, cy, command_spec(SLEEP.format(600), gpu_ids=[1]))
        waiting_with(client, cy, busy, "")
        book(client, ana, starts_in_s=3600, duration_s=3600)

        unbounded = submit(client, cy, command_spec(SLEEP.format(0), gpus=1))
        why = waiting_with(client, cy, unbounded, "GPU 0 is reserved for paper (ana)")
        assert "a job with --time under 59m would start now" in why["wait_reason"]
        preview = client.post(
            "/v1/jobs", params={"dry_run": "true"}, json=command_spec("pass"), headers=cy
        ).json()
        assert not preview["would_start"]
        assert preview["wait_reason"].startswith("GPU 0 is reserved for paper (ana)")

        short = submit(client, cy, {**command_spec(SLEEP.format(0)), "time_limit_s": 600})
        done = wait_for(client, short, ended)
        assert (done["status"], done["assigned_gpus"]) == ("succeeded", [0])
        assert job(client, cy, unbounded)["status"] == "queued"

        # ana's job before the window belongs there all the same: it may run into it.
        mine = submit(client, ana, command_spec(SLEEP.format(0)))
        client.headers.update(ana)
        assert wait_for(client, mine, ended)["assigned_gpus"] == [0]
        client.post(f"/v1/jobs/{busy}/cancel", headers=cy)


def test_a_job_naming_the_reservation_waits_for_it_then_runs_on_its_gpus(settings, db):
    ana, bo = as_user(db, "ana"), as_user(db, "bo")
    with serving(settings) as client:
        book(client, ana, starts_in_s=4, duration_s=600, gpu_ids=[1], users=["ana", "bo"])
        named = {**command_spec("pass"), "reservation": "paper"}
        first = submit(client, bo, named)
        waiting_with(client, bo, first, "waiting for reservation paper (ana, bo)")
        client.headers.update(bo)
        done = wait_for(client, first, ended, timeout_s=30)
        assert (done["status"], done["assigned_gpus"]) == ("succeeded", [1])
        started = datetime.fromisoformat(done["started_at"])
        opened = datetime.fromisoformat(
            client.get("/v1/reservations/paper", headers=bo).json()["starts_at"]
        )
        assert started >= opened

        # Refused at submit: a name that is not booked; an owner who is not a user.
        cy = as_user(db, "cy")
        wrong = client.post("/v1/jobs", json={**named, "reservation": "nope"}, headers=bo)
        assert wrong.status_code == 422 and "reservation" in wrong.text
        outsider = client.post("/v1/jobs", json=named, headers=cy)
        assert outsider.status_code == 422
        assert "cy is not one of reservation paper's users (ana, bo)" in outsider.text


def test_its_opening_preempts_an_outsider_still_on_its_gpu(settings, db):
    preempting = settings.model_copy(update={"preempt": "priority", "preempt_min_run_s": 0.0})
    ana, cy, root = as_user(db, "ana"), as_user(db, "cy"), as_user(db, "root", admin=True)
    with serving(preempting) as client:
        argv = [sys.executable, str(EXAMPLE), "--epochs", "1000", "--epoch-s", "0.3"]
        spec = command_spec("", gpu_ids=[0])
        spec["command"]["argv"] = argv
        outsider = submit(client, cy, {**spec, "preemptible": True})
        client.headers.update(cy)
        wait_for(client, outsider, lambda j: j["status"] == "running")
        # Booked after it started: it is in the way when the window opens.
        book(client, ana, starts_in_s=3, duration_s=600)
        requeued = wait_for(client, outsider, lambda j: j["preemptions"] == 1, timeout_s=60)
        assert requeued["preempted_by"] is None
        again = waiting_with(client, cy, outsider, "GPU 0 is reserved for paper (ana)")
        first = again["previous_attempts"][0]
        assert first["reason"] == "preempted"
        assert first["message"].startswith("preempted for reservation paper, whose window on GPU 0")
        audit = client.get("/v1/audit", headers=root).json()["entries"]
        assert any(
            e["target"] == f"job/{outsider}" and e["detail"].get("for_reservation") == "paper"
            for e in audit
        )
        member = submit(client, ana, command_spec("pass", gpu_ids=[0]))
        client.headers.update(ana)
        assert wait_for(client, member, ended)["status"] == "succeeded"
        client.post(f"/v1/jobs/{outsider}/cancel", headers=cy)


def test_without_preemption_the_window_waits_and_says_who_holds_it(settings, db):
    ana, cy = as_user(db, "ana"), as_user(db, "cy")
    with serving(settings) as client:
        outsider = submit(client, cy, command_spec(SLEEP.format(600), gpu_ids=[0]))
        client.headers.update(cy)
        wait_for(client, outsider, lambda j: j["status"] == "running")
        book(client, ana, starts_in_s=0, duration_s=600)
        named = submit(client, ana, {**command_spec("pass"), "reservation": "paper"})
        why = waiting_with(client, ana, named, "in reservation paper:")["wait_reason"]
        assert f"GPU 0 is held whole by job {outsider}" in why
        assert job(client, cy, outsider)["status"] == "running"
        client.post(f"/v1/jobs/{outsider}/cancel", headers=cy)
        client.headers.update(ana)
        assert wait_for(client, named, ended)["assigned_gpus"] == [0]


def test_a_reservation_its_users_leave_idle_is_released(settings: Settings, db):
    quick = settings.model_copy(update={"reservation_idle_release_s": 2.0})
    ana, cy = as_user(db, "ana"), as_user(db, "cy")
    with serving(quick) as client:
        book(client, ana, starts_in_s=0, duration_s=3600, gpu_ids=[0, 1])
        kept_off = submit(client, cy, command_spec("pass"))
        waiting_with(client, cy, kept_off, "GPUs 0-1 are reserved for paper (ana)")
        client.headers.update(cy)
        done = wait_for(client, kept_off, ended, timeout_s=30)
        assert done["status"] == "succeeded"
        released = client.get("/v1/reservations/paper", headers=cy).json()
        assert released["state"] == "released"
        assert released["released_why"].startswith(
            "released: its users had nothing queued or running in it for 2 s"
        )
