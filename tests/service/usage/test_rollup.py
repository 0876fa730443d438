"""The rollup against the sum it stands for: weeks of attempts and ended jobs written through
gpuq's own write paths (the ledger, the state gate), then reports over many periods,
whole days and parts of days, each compared with the same report added up from every
attempt and job one by one. Sums and counts agree; percentiles within 1 %."""

import random
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from sqlalchemy import select

from gpuq.contract.states import JobStatus
from service.jobs.writes.gate import transition
from service.store.tables import Job
from service.store.usage_tables import AttemptUsage
from service.usage import ledger, rollup, waits
from service.usage.reads import split, usage_report
from service.usage.report import Ended, Held, Period, build

pytestmark = pytest.mark.backends("sqlite", "postgres")

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAYS = 20
NOW = T0 + timedelta(days=DAYS, hours=5, minutes=17)
OWNERS = ("ana", "bo", "cy")
OUTCOMES = ("succeeded", "failed", "cancelled", "timed_out", "preempted")
ENDED = (JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled, JobStatus.timed_out)


def attempts(rng: random.Random, n: int) -> list[dict]:
    """Ledger rows: up to 4 GPUs (none; some of unknown indices), waits from nothing to
    hours, a few attempts over several days, lost time on failures and preemptions."""
    rows = []
    for _ in range(n):
        gpus = rng.choice((0, 1, 1, 2, 4))
        on = [] if rng.random() < 0.1 else sorted(rng.sample(range(4), gpus))
        start = T0 + timedelta(seconds=rng.uniform(0, (DAYS - 1) * 86400))
        held = rng.expovariate(1 / 3600) * (30 if rng.random() < 0.05 else 1)
        end = min(start + timedelta(seconds=held), NOW - timedelta(hours=1))
        wait = rng.choice((0.0, 0.0004, 300.0, rng.expovariate(1 / 600)))
        outcome = rng.choice(OUTCOMES)
        seconds = gpus * (end - start).total_seconds()
        rows.append(
            {
                "job_id": 1,
                "attempt": 1,
                "owner": rng.choice(OWNERS),
                "gpus": gpus,
                "gpu_indices": on,
                "queued_at": start - timedelta(seconds=wait),
                "started_at": start,
                "ended_at": end,
                "outcome": outcome,
                "reason": None,
                "final": outcome != "preempted",
                "gpu_seconds": seconds,
                "lost_gpu_seconds": rng.uniform(0, seconds)
                if outcome in ("failed", "preempted")
                else 0.0,
                "preempted_by": None,
            }
        )
    return rows


def add_job(session, owner: str, on: list[int], queued: datetime, started: datetime) -> int:
    job = Job(name="j", owner=owner, spec={}, gpu_count=len(on), assigned_gpus=on, queued_at=queued)
    session.add(job)
    session.flush()
    assert job.id is not None
    assert transition(session, job.id, JobStatus.starting, attempt=1, started_at=started)
    return job.id


@pytest.fixture
def history(db):
    """The database filled; every attempt and ended job, and the running ones, as held."""
    rng = random.Random(52)
    rows = attempts(rng, 300)
    with db.write() as session:
        for row in rows:
            ledger.write(session, row)
        for _ in range(120):
            on = sorted(rng.sample(range(4), rng.choice((0, 1, 2))))
            at = T0 + timedelta(seconds=rng.uniform(0, DAYS * 86400))
            job_id = add_job(
                session, rng.choice(OWNERS), on, at - timedelta(hours=2), at - timedelta(hours=1)
            )
            assert transition(session, job_id, rng.choice(ENDED), finished_at=at)
        running = [
            Held("ana", 2, (0, 1), T0, T0 + timedelta(days=3), NOW),
            Held("bo", 1, (3,), NOW - timedelta(hours=2), NOW - timedelta(minutes=30), NOW),
        ]
        for h in running:
            add_job(session, h.owner, list(h.gpu_indices), h.queued_at, h.started_at)
    with db.read() as session:
        conn = session.connection()
        held = [rollup.held(row) for row in conn.execute(select(*rollup.LEDGER))]
        job = Job.__table__.c  # type: ignore[attr-defined]
        ended = [
            Ended(owner, str(status), rollup.indices(on), at)
            for owner, status, on, at in conn.execute(
                select(job.owner, job.status, job.assigned_gpus, job.finished_at).where(
                    job.finished_at.is_not(None)
                )
            )
        ]
    return held + running, ended


def periods(rng: random.Random) -> list[Period]:
    """Periods of every shape: inside a day, across one midnight, whole days, weeks, the
    whole history, from before it, ending now."""
    chosen = [
        Period(T0 + timedelta(days=3), T0 + timedelta(days=4)),
        Period(T0 + timedelta(days=2), NOW),
        Period(T0 - timedelta(days=2), NOW),
        Period(T0 + timedelta(days=5, hours=23), T0 + timedelta(days=6, hours=1)),
        Period(NOW - timedelta(minutes=40), NOW),
    ]
    for span_h in (0.5, 5, 23, 24, 30, 84, 240, 24 * 30):
        for _ in range(3):
            since = T0 + timedelta(seconds=rng.uniform(-86400, DAYS * 86400))
            until = min(NOW, since + timedelta(hours=span_h))
            chosen.append(Period(since, until))
    return chosen


def test_periods_split_into_whole_days_and_parts_inside_one_day_each():
    for period in periods(random.Random(7)):
        whole, parts = split(period)
        covered = sum((p.seconds for p in parts), 0.0)
        if whole is not None:
            first, end = whole
            covered += (end - first).days * 86400
            assert all(p.until <= midnight(first) or p.since >= midnight(end) for p in parts)
        assert covered == pytest.approx(period.seconds)
        assert all(p.since.date() == (p.until - timedelta(microseconds=1)).date() for p in parts)


def midnight(day) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


@pytest.mark.parametrize("by", ["owner", "day", "gpu"])
def test_reports_from_the_rollup_match_the_sum_of_every_attempt(db, history, by):
    held, ended = history
    for period in periods(random.Random(11)):
        for rows_of in (None, "ana"):
            if by == "day" and (period.until - period.since).days >= 1000:
                continue
            got = usage_report(db, period, by, rows_of=rows_of, now=NOW)
            want = build(period, by, held, ended, got.gpus, rows_of)
            assert_same(got.model_dump(), want.model_dump(), f"{period} {by} {rows_of}")


def assert_same(got: dict, want: dict, where: str) -> None:
    assert sorted(map(key, got["rows"]), key=str) == sorted(map(key, want["rows"]), key=str), where
    wanted = {key(r): r for r in want["rows"]}
    for row in [*got["rows"], got["total"]]:
        expected = wanted[key(row)] if row is not got["total"] else want["total"]
        assert row["gpu_hours"] == pytest.approx(expected["gpu_hours"], abs=2e-6), where
        for cause, hours in row["lost_gpu_hours"].items():
            assert hours == pytest.approx(expected["lost_gpu_hours"][cause], abs=2e-6), where
        assert row["jobs"] == expected["jobs"], where
        waits, wanted_waits = row["queue_wait"], expected["queue_wait"]
        assert waits["attempts"] == wanted_waits["attempts"], where
        for pct in ("median_s", "p95_s"):
            if wanted_waits[pct] is None:
                assert waits[pct] is None, where
            else:
                assert waits[pct] == pytest.approx(wanted_waits[pct], rel=0.01, abs=0.002), where


def key(row: dict):
    return row["owner"], row["day"], row["gpu"]


def test_the_ledger_and_the_rollup_count_every_attempt_once(db, history):
    with db.read() as session:
        conn = session.connection()
        ledger_rows = conn.execute(select(AttemptUsage.__table__)).all()  # type: ignore[attr-defined]
        touched = conn.execute(select(rollup.ATTEMPT_DAY)).all()
    assert len(ledger_rows) == 300
    assert {usage_id for _, usage_id in touched} == {row.id for row in ledger_rows}
    # a rebuild makes the same rollup as the writes made, row by row
    before = whole_rollup(db)
    with db.write() as session:
        rollup.rebuild(session.connection())
    after = whole_rollup(db)
    assert after.keys() == before.keys()
    for k, row in before.items():
        assert after[k][:-1] == pytest.approx(row[:-1]), k
        rebuilt, written = (np.frombuffer(r[-1], dtype=waits.BUCKETS) for r in (after[k], row))
        assert rebuilt[["bucket", "count"]].tolist() == written[["bucket", "count"]].tolist(), k
        assert rebuilt["total"] == pytest.approx(written["total"]), k


def whole_rollup(db) -> dict:
    with db.read() as session:
        rows = session.connection().execute(select(rollup.DAY_ROW)).all()
    return {(r.day, r.owner, r.gpu): (*r[3:-1], bytes(r.waits)) for r in rows}
