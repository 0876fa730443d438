"""Reading a period's usage in one read transaction: its whole UTC days from the rollup
(`usage_day`), the attempts and jobs that ended in its part-days, the jobs still running,
and how many GPUs there are.

Every query is bounded by a key: the rollup by day, a part-day's attempts by the days they
touched (`attempt_day`), the jobs that ended by `finished_at`, running jobs by `status`; so
a report over a year reads a few thousand rows, and a week's costs the same after a year
of history as after a week."""

from datetime import UTC, date, datetime, time, timedelta
from itertools import pairwise

from sqlalchemy import Connection, Table, func, select

from gpuq.contract.states import ACTIVE, TERMINAL
from service.store.db import Database, utcnow
from service.store.tables import Gpu, Job
from service.store.usage_tables import AttemptUsage
from service.usage import rollup
from service.usage.public import By, UsageReport
from service.usage.report import Ended, Held, Period, UsageTally
from service.usage.reserved import idle_reserved

JOB: Table = Job.__table__  # type: ignore[attr-defined]
USAGE: Table = AttemptUsage.__table__  # type: ignore[attr-defined]
GPU: Table = Gpu.__table__  # type: ignore[attr-defined]
DAY = timedelta(days=1)


def usage_report(
    db: Database,
    period: Period,
    by: By,
    *,
    rows_of: str | None = None,
    now: datetime | None = None,
) -> UsageReport:
    """The report of `period` (its end no later than `now`) cut `by` owner, day or GPU; the
    rows count only `rows_of`'s work when given."""
    now = now or utcnow()
    whole, parts = split(period)
    tally = UsageTally(period, by, rows_of)
    with db.read() as session:  # one snapshot: an attempt that ends is counted once
        conn = session.connection()
        for part in parts:
            for h in _ended_attempts(conn, part):
                tally.held(h, within=part)
            for job in _ended_jobs(conn, part, by):
                tally.ended(job, within=part)
        for h in _running(conn, period, now):
            tally.held(h)
        for h in idle_reserved(conn, period, now):
            tally.reserved_idle(h)
        if whole is not None:
            for day in rollup.whole_days(conn, *whole, by):
                tally.day(day)
        gpu_count = conn.execute(select(func.count()).select_from(GPU)).scalar_one()
    return tally.report(gpu_count)


def split(period: Period) -> tuple[tuple[date, date] | None, list[Period]]:
    """The period's whole UTC days (the first and the one after the last), if it has any,
    and the parts of days around them, each inside one day."""
    last = _midnight_before(period.until)
    first = _midnight_before(period.since)
    first = first if first == period.since else first + DAY
    if first >= last:  # no whole day: the period cut at its midnight, if it has one
        cut = [t for t in (first,) if period.since < t < period.until]
        edges = [period.since, *cut, period.until]
        return None, [Period(a, b) for a, b in pairwise(edges)]
    parts = []
    if period.since < first:
        parts.append(Period(period.since, first))
    if last < period.until:
        parts.append(Period(last, period.until))
    return (first.date(), last.date()), parts


def _midnight_before(at: datetime) -> datetime:
    """The last UTC midnight at or before `at`."""
    return datetime.combine(at.astimezone(UTC).date(), time(), UTC)


def _ended_attempts(conn: Connection, part: Period) -> list[Held]:
    """The ledger's attempts that touched the UTC day of `part`, by the day's key: all that
    overlap it, and some that do not (which count nothing in it). Asking for the overlap
    in SQL too lets PostgreSQL read by `ended_at` instead: every attempt ended since."""
    touched = rollup.ATTEMPT_DAY
    rows = conn.execute(
        select(*rollup.LEDGER)
        .join(touched, touched.c.usage_id == USAGE.c.id)
        .where(touched.c.day == part.since.astimezone(UTC).date())
    ).all()
    return [rollup.held(row) for row in rows]


def _running(conn: Connection, period: Period, now: datetime) -> list[Held]:
    """The jobs running now, as attempts that end now."""
    rows = conn.execute(
        select(
            JOB.c.owner,
            JOB.c.gpu_count,
            JOB.c.assigned_gpus,
            JOB.c.created_at,
            JOB.c.queued_at,
            JOB.c.started_at,
        ).where(
            JOB.c.status.in_(ACTIVE),
            JOB.c.started_at.is_not(None),
            JOB.c.started_at < period.until,
        )
    )
    return [
        Held(owner, gpus, rollup.indices(on), queued or created, started, max(now, started))
        for owner, gpus, on, created, queued, started in rows
    ]


def _ended_jobs(conn: Connection, period: Period, by: By) -> list[Ended]:
    """The jobs that reached their final state in the period: each one with the GPUs of its
    last attempt for `by=gpu`; otherwise counted per owner, state and UTC day."""
    # Only a final state sets `finished_at`. Asking for the states as well would make
    # SQLite read by the state's index: every job that ever ended.
    inside = (JOB.c.finished_at >= period.since, JOB.c.finished_at < period.until)
    if by == "gpu":
        each = conn.execute(
            select(JOB.c.owner, JOB.c.status, JOB.c.assigned_gpus, JOB.c.finished_at).where(*inside)
        )
        ended = [Ended(who, str(status), rollup.indices(on), at) for who, status, on, at in each]
    else:
        day = func.date(JOB.c.finished_at)  # stored in UTC: the UTC day
        counted = conn.execute(
            select(JOB.c.owner, JOB.c.status, func.min(JOB.c.finished_at), func.count())
            .where(*inside)
            .group_by(JOB.c.owner, JOB.c.status, day)
        )
        ended = [Ended(owner, str(status), (), at, n) for owner, status, at, n in counted]
    return [job for job in ended if job.status in TERMINAL]
