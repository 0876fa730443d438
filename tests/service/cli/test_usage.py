"""`gpuq usage` and the efficiency line of `gpuq show`, in-process against the API."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from gpuq.contract.states import JobStatus
from service import jobs
from service.store.reservation_tables import Reservation
from service.store.tables import Job
from service.usage import ledger
from tests.conftest import command_spec


def attempt(db, owner: str, hours_ago: float, hours: float, gpus: list[int], **fields) -> None:
    start = datetime.now(UTC) - timedelta(hours=hours_ago)
    row = {
        "job_id": 1,
        "attempt": 1,
        "owner": owner,
        "gpus": len(gpus),
        "gpu_indices": gpus,
        "queued_at": start - timedelta(seconds=90),
        "started_at": start,
        "ended_at": start + timedelta(hours=hours),
        "outcome": "succeeded",
        "reason": None,
        "final": True,
        "gpu_seconds": 3600 * hours * len(gpus),
        "lost_gpu_seconds": 0.0,
        "preempted_by": None,
    }
    with db.write() as session:  # as `ledger.record_attempt` writes one
        ledger.write(session, row | fields)


def test_usage_prints_a_row_per_owner_then_the_total(api, gpuq):
    db = api.app.state.service.db
    attempt(db, "ana", 5, 2, [0])
    attempt(db, "bo", 3, 1.5, [0, 1], outcome="failed", lost_gpu_seconds=3 * 3600)
    attempt(db, "bo", 30 * 24, 1, [1])  # a month ago: outside the default week

    code, out, _ = gpuq("usage")
    assert code == 0
    heading, header, *rows = out.splitlines()
    assert heading.startswith("usage ") and heading.endswith(" UTC (7 d), 2 GPUs")
    assert header.split() == [
        "OWNER", "GPU-HOURS", "SHARE", "JOBS", "LOST", "GPU-HOURS", "WAIT", "P50/P95"
    ]  # fmt: skip
    assert [r.split()[:3] for r in rows] == [
        ["bo", "3.00", "0.9%"],  # 3 GPU-hours of 2 GPUs x 168 h
        ["ana", "2.00", "0.6%"],
        ["total", "5.00", "1.5%"],
    ]
    assert "3.00 to failures" in rows[0] and "1 min 30 s / 1 min 30 s" in rows[0]

    code, out, _ = gpuq("usage", "--by", "gpu", "--since", "4h")
    _, header, *rows = out.splitlines()
    assert header.split()[0] == "GPU"
    assert [r.split()[:2] for r in rows] == [["0", "2.50"], ["1", "1.50"], ["total", "4.00"]]

    code, out, _ = gpuq("usage", "--by", "day", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["by"] == "day" and len(report["rows"]) == 8
    assert report["total"]["gpu_hours"] == 5.0

    until = (datetime.now(UTC) - timedelta(days=29)).isoformat()
    code, out, _ = gpuq("usage", "--until", until, "--json")
    assert code == 0, "the week before --until, not the week before now"
    month_ago = json.loads(out)
    assert [(r["owner"], r["gpu_hours"]) for r in month_ago["rows"]] == [("bo", 1.0)]


def test_usage_shows_reserved_idle_hours_when_there_are_some(api, gpuq):
    db = api.app.state.service.db
    attempt(db, "bo", 5, 1, [0])
    starts = datetime.now(UTC) - timedelta(hours=6)
    with db.write() as session:  # as the reservations API stores one
        session.add(
            Reservation(
                name="paper",
                owner="ana",
                users=["ana"],
                gpu_indices=[0],
                starts_at=starts,
                ends_at=starts + timedelta(hours=3),
            )
        )
    code, out, _ = gpuq("usage")
    assert code == 0
    _, header, *rows = out.splitlines()
    assert header.split()[-2:] == ["RESERVED", "IDLE"]
    # bo ran 1 h of ana's 3 h window: 2 GPU-hours booked and idle, against ana
    assert [(r.split()[0], r.split()[-1]) for r in rows] == [
        ("bo", "-"),
        ("ana", "2.00"),
        ("total", "2.00"),
    ]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--since", "yesterday"], "Invalid value for '--since'"),
        (["--until", "soon"], "Invalid value for '--until'"),
        (["--since", "1d", "--until", "2d"], "Invalid value for '--since'"),
        (["--by", "week"], "Invalid value for '--by'"),
    ],
)
def test_bad_options_exit_2_naming_the_option(gpuq, args, words):
    code, out, err = gpuq("usage", *args)
    assert code == 2 and out == ""
    assert words in " ".join(err.split())


def test_show_prints_the_efficiency_line(api, gpuq):
    spec = {**command_spec("pass", gpus=1, memory_mb=8192), "time_limit_s": 3600}
    job_id = api.post("/v1/jobs", json=spec).json()["id"]
    db = api.app.state.service.db
    with db.write() as session:
        jobs.transition(session, job_id, JobStatus.starting, attempt=1)
        jobs.transition(session, job_id, JobStatus.succeeded)
        session.connection().execute(
            update(Job.__table__)  # type: ignore[attr-defined]
            .where(Job.__table__.c.id == job_id)  # type: ignore[attr-defined]
            .values(
                started_at=datetime.now(UTC) - timedelta(minutes=20),
                finished_at=datetime.now(UTC) - timedelta(minutes=8),
                gpu_memory_peak_mb=2150,
                gpu_util_avg_pct=43.4,
            )
        )
    code, out, _ = gpuq("show", str(job_id))
    assert code == 0
    assert (
        "  efficiency: used 2.1 of 8 GiB requested: next time --mem 3G; GPU utilisation 43 %; "
        "ran 12 min of its 1 h limit\n"
    ) in out
    shown = json.loads(gpuq("show", str(job_id), "--json")[1])
    assert shown["efficiency"]["suggested_memory_mb"] == 3072
    # a listing builds jobs from loaded rows, a read from a plain row: the same answer
    (listed,) = [j for j in api.get("/v1/jobs").json()["jobs"] if j["id"] == job_id]
    assert listed["efficiency"] == shown["efficiency"]

    queued = api.post("/v1/jobs", json=spec).json()
    assert queued["efficiency"] is None
    assert "efficiency" not in gpuq("show", str(queued["id"]))[1]
