"""`GET /v1/usage` over real command jobs on simulated GPUs: GPU-hours within a second of
what the jobs held, parts of attempts cut at the period's edges, jobs by final state, the
hours lost to a failure, jobs still running counted up to now, and who sees which rows."""

import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from gpuq.contract.states import JobStatus
from service.jobs.writes.gate import transition
from service.store.tables import Job
from service.team import users
from service.usage import ledger
from tests.conftest import command_spec, ended

pytestmark = pytest.mark.backends("sqlite", "postgres")

SLEEP = "import time; time.sleep({})"
FAIL = "import sys, time; time.sleep(1); sys.exit(3)"


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def submit(client, token: str, spec: dict) -> int:
    response = client.post("/v1/jobs", json=spec, headers=auth(token))
    assert response.status_code == 201, response.text
    return response.json()["id"]


def wait_for(client, token: str, job_id: int, until, timeout_s: float = 60) -> dict:
    """`tests.conftest.wait_for`, with a token."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}", headers=auth(token)).json()
        if until(job):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not get there; last seen: {job}")


def held_s(job: dict) -> float:
    """GPUs times seconds from the job's launch to its end (or to now)."""
    start = datetime.fromisoformat(job["started_at"])
    end = datetime.fromisoformat(job["finished_at"]) if job["finished_at"] else datetime.now(UTC)
    return len(job["assigned_gpus"]) * (end - start).total_seconds()


def usage(client, token: str, **params) -> dict:
    response = client.get("/v1/usage", params=params, headers=auth(token))
    assert response.status_code == 200, response.text
    return response.json()


def test_usage_of_real_jobs_by_owner_day_and_gpu_and_who_sees_what(client):
    db = client.app.state.service.db
    root, ana, bo = (users.add_user(db, n, admin=n == "root") for n in ("root", "ana", "bo"))

    a = submit(client, ana, command_spec(SLEEP.format(2), gpus=2))
    job_a = wait_for(client, ana, a, ended)
    assert job_a["status"] == "succeeded"
    b = submit(client, ana, command_spec(FAIL, gpus=1))
    c = submit(client, bo, command_spec(SLEEP.format(60), gpus=1))
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    d = submit(client, bo, {**command_spec("pass", gpus=1), "not_before": later})

    wait_for(client, bo, c, lambda j: j["status"] == "running")
    time.sleep(1)
    running = usage(client, bo, since="1h")
    assert [r["owner"] for r in running["rows"]] == ["bo"]
    so_far = held_s(client.get(f"/v1/jobs/{c}", headers=auth(bo)).json())
    assert running["rows"][0]["gpu_hours"] * 3600 == pytest.approx(so_far, abs=1)
    assert running["rows"][0]["gpu_hours"] > 0, "a running job counts up to now"
    assert running["rows"][0]["jobs"] == {"succeeded": 0, "failed": 0, "cancelled": 0,
                                          "timed_out": 0}  # fmt: skip

    for job_id in (c, d):
        assert client.post(f"/v1/jobs/{job_id}/cancel", headers=auth(bo)).status_code == 202
    jobs = {j: wait_for(client, root, j, ended) for j in (a, b, c, d)}
    assert [jobs[j]["status"] for j in (b, c, d)] == ["failed", "cancelled", "cancelled"]
    a_s, b_s, c_s = held_s(jobs[a]), held_s(jobs[b]), held_s(jobs[c])
    assert a_s >= 2 * 2 and b_s >= 1 and jobs[d]["started_at"] is None

    # An admin: every owner's row, most GPU time first.
    report = usage(client, root, since="1h")
    assert (report["by"], report["gpus"], report["rows_of"]) == ("owner", 2, None)
    rows = {r["owner"]: r for r in report["rows"]}
    assert set(rows) == {"ana", "bo"}
    assert rows["ana"]["gpu_hours"] * 3600 == pytest.approx(a_s + b_s, abs=1)
    assert rows["bo"]["gpu_hours"] * 3600 == pytest.approx(c_s, abs=1)
    assert rows["ana"]["jobs"] == {"succeeded": 1, "failed": 1, "cancelled": 0, "timed_out": 0}
    assert rows["bo"]["jobs"] == {"succeeded": 0, "failed": 0, "cancelled": 2, "timed_out": 0}
    assert rows["ana"]["lost_gpu_hours"]["failures"] * 3600 == pytest.approx(b_s, abs=1)
    assert rows["bo"]["lost_gpu_hours"] == {"failures": 0.0, "preemptions": 0.0}
    total = report["total"]
    total_s = a_s + b_s + c_s
    assert total["gpu_hours"] * 3600 == pytest.approx(total_s, abs=1)
    assert total["share"] == pytest.approx(total_s / (2 * 3600), abs=1e-3)
    assert total["queue_wait"]["attempts"] == 3, "d never started"
    assert 0 <= total["queue_wait"]["median_s"] <= total["queue_wait"]["p95_s"] < 30

    by_day = usage(client, root, since="1h", by="day")
    # Each row's GPU-hours are rounded (to 6 places) as the total's are: sums may differ in
    # the last place.
    assert sum(r["gpu_hours"] for r in by_day["rows"]) == pytest.approx(
        total["gpu_hours"], abs=1e-5
    )
    by_gpu = usage(client, root, since="1h", by="gpu")
    assert [r["gpu"] for r in by_gpu["rows"]] == [0, 1]
    assert sum(r["gpu_hours"] for r in by_gpu["rows"]) == pytest.approx(
        total["gpu_hours"], abs=1e-5
    )

    # A member: the team's total, and rows of their own work alone.
    mine = usage(client, ana, since="1h")
    assert mine["rows_of"] == "ana"
    assert [r["owner"] for r in mine["rows"]] == ["ana"]
    assert mine["rows"][0] == rows["ana"]
    assert mine["total"]["gpu_hours"] == total["gpu_hours"]
    assert mine["total"]["jobs"]["cancelled"] == 2
    mine_by_gpu = usage(client, ana, since="1h", by="gpu")
    ana_on = {r["gpu"]: r["gpu_hours"] * 3600 for r in mine_by_gpu["rows"]}
    (b_gpu,) = jobs[b]["assigned_gpus"]
    for gpu in (0, 1):
        expected = a_s / 2 + (b_s if gpu == b_gpu else 0)
        assert ana_on[gpu] == pytest.approx(expected, abs=1)
    assert sum(r["jobs"]["cancelled"] for r in mine_by_gpu["rows"]) == 0, "bo's jobs"
    assert [r["owner"] for r in usage(client, bo, since="1h")["rows"]] == ["bo"]

    # A period inside job a: only its part inside counts.
    start = datetime.fromisoformat(jobs[a]["started_at"]) + timedelta(seconds=0.5)
    end = datetime.fromisoformat(jobs[a]["finished_at"]) - timedelta(seconds=0.5)
    inside = usage(client, root, since=start.isoformat(), until=end.isoformat())
    assert inside["total"]["gpu_hours"] * 3600 == pytest.approx(a_s - 2, abs=0.1)
    assert inside["total"]["share"] == pytest.approx(1.0, abs=1e-3)
    assert inside["total"]["jobs"]["succeeded"] == 0, "a ended after the period"
    assert inside["total"]["queue_wait"]["attempts"] == 0, "a started before it"


def record(db, owner: str, start: datetime, hours: float, **fields) -> None:
    """A ledger row as `ledger.record_attempt` writes one, at chosen times."""
    end = start + timedelta(hours=hours)
    values = {
        "job_id": 1,
        "attempt": 1,
        "owner": owner,
        "gpus": 1,
        "gpu_indices": [0],
        "queued_at": start - timedelta(minutes=5),
        "started_at": start,
        "ended_at": end,
        "outcome": "succeeded",
        "reason": None,
        "final": True,
        "gpu_seconds": 3600 * hours,
        "lost_gpu_seconds": 0.0,
        "preempted_by": None,
    }
    with db.write() as session:
        ledger.write(session, values | fields)


def finished(api, owner: str, status: str, at: str) -> None:
    """A job of `owner` that ended `status` at `at` (UTC), through the state gate."""
    job_id = api.post("/v1/jobs", json=command_spec("pass", gpus=1)).json()["id"]
    with api.app.state.service.db.write() as session:
        session.connection().execute(
            update(Job.__table__)  # type: ignore[attr-defined]
            .where(Job.__table__.c.id == job_id)  # type: ignore[attr-defined]
            .values(owner=owner)
        )
        at_ = datetime.fromisoformat(at)
        assert transition(session, job_id, JobStatus.starting, attempt=1)
        assert transition(session, job_id, JobStatus(status), finished_at=at_)


def test_a_past_period_counts_the_parts_of_attempts_across_its_edges(api):
    db = api.app.state.service.db
    finished(api, "ana", "succeeded", "2026-01-09T23:00Z")
    finished(api, "ana", "succeeded", "2026-01-10T01:00Z")
    finished(api, "bo", "failed", "2026-01-10T02:00Z")
    finished(api, "bo", "failed", "2026-01-11T00:00Z")  # at the end: not inside
    since = datetime(2026, 1, 10, tzinfo=UTC)
    until = since + timedelta(days=1)
    record(db, "ana", since - timedelta(hours=2), 3)  # 1 h inside
    record(db, "ana", until - timedelta(hours=1), 5, gpus=2, gpu_indices=[0, 1])  # 2 inside
    record(db, "bo", since - timedelta(days=3), 100)  # across all of it: 24 inside
    record(db, "bo", since - timedelta(hours=5), 1)  # before
    record(db, "bo", until, 1)  # after (it starts at the excluded end)
    record(
        db,
        "cy",
        since + timedelta(hours=6),
        2,
        outcome="preempted",
        final=False,
        lost_gpu_seconds=1800,
    )
    report = api.get(
        "/v1/usage", params={"since": since.isoformat(), "until": "2026-01-11T00:00Z"}
    ).json()
    assert (report["since"], report["until"]) == ("2026-01-10T00:00:00Z", "2026-01-11T00:00:00Z")
    assert report["rows_of"] is None, "open mode: everyone sees everything"
    assert [(r["owner"], r["gpu_hours"]) for r in report["rows"]] == [
        ("bo", 24.0),
        ("ana", 3.0),
        ("cy", 2.0),
    ]
    assert report["total"]["share"] == pytest.approx(29 / 48)
    assert report["total"]["lost_gpu_hours"] == {"failures": 0.0, "preemptions": 0.5}
    assert report["total"]["queue_wait"] == {"attempts": 2, "median_s": 300.0, "p95_s": 300.0}
    assert [(r["owner"], r["jobs"]["succeeded"], r["jobs"]["failed"]) for r in report["rows"]] == [
        ("bo", 0, 1),
        ("ana", 1, 0),
        ("cy", 0, 0),
    ]
    by_day = api.get(
        "/v1/usage", params={"since": "2026-01-09T12:00", "until": "2026-01-11", "by": "day"}
    ).json()
    assert [(r["day"], r["gpu_hours"]) for r in by_day["rows"]] == [
        ("2026-01-09", 12 + 1 + 2),  # from noon: bo's long one, bo's at 19:00, ana's at 22:00
        ("2026-01-10", 29.0),
    ]
    assert [r["jobs"] for r in by_day["rows"]] == [
        {"succeeded": 1, "failed": 0, "cancelled": 0, "timed_out": 0},
        {"succeeded": 1, "failed": 1, "cancelled": 0, "timed_out": 0},
    ]


@pytest.mark.parametrize(
    ("params", "loc", "words"),
    [
        ({"since": "yesterday"}, "since", "is not a time"),
        ({"until": "2026-13-01"}, "until", "is not a time"),
        ({"since": "1d", "until": "2d"}, "since", "is not before"),
        ({"since": "2999-01-01"}, "since", "is not before now"),
        ({"since": "99999999999d"}, "since", "out of range"),
        ({"since": "x" * 65}, "since", "at most 64 characters"),
        ({"by": "week"}, "by", "'owner', 'day' or 'gpu'"),
        ({"since": "2000-01-01", "by": "day"}, "since", "at most 1000 days"),
    ],
)
def test_bad_since_until_or_by_is_a_422_naming_it(api, params, loc, words):
    response = api.get("/v1/usage", params=params)
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["query", loc]
    assert words in error["msg"]


def test_the_default_period_is_the_last_seven_days(api):
    report = api.get("/v1/usage").json()
    since, until = (datetime.fromisoformat(report[k]) for k in ("since", "until"))
    assert until - since == timedelta(days=7)
    assert abs((datetime.now(UTC) - until).total_seconds()) < 5
    assert (report["rows"], report["total"]["gpu_hours"]) == ([], 0.0)
