"""Reading a period's usage: the ledger's attempts that overlap it, the jobs still running,
the jobs that ended in it, and how many GPUs there are, in one read transaction.

Each query is bounded by an index: the ledger by `ended_at`, ended jobs by `finished_at`,
running jobs by `status`; so a week's report costs the same after a year of history as
after a week."""

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Table, func, null, select

from gpuq.contract.states import ACTIVE, TERMINAL
from service.store.db import Database, utcnow
from service.store.tables import AttemptUsage, Gpu, Job
from service.usage.public import By, UsageReport
from service.usage.report import Ended, Held, Period, build

JOB: Table = Job.__table__  # type: ignore[attr-defined]
USAGE: Table = AttemptUsage.__table__  # type: ignore[attr-defined]
GPU: Table = Gpu.__table__  # type: ignore[attr-defined]

#: Whose loss a ledger row's `lost_gpu_seconds` is, by its outcome.
LOST_TO = {"failed": "failures", "preempted": "preemptions"}


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
    with db.read() as session:  # one snapshot: an attempt that ends is counted once
        conn = session.connection()
        held = _ended_attempts(conn, period, by) + _running(conn, period, now)
        jobs = _ended_jobs(conn, period, by)
        gpu_count = conn.execute(select(func.count()).select_from(GPU)).scalar_one()
    return build(period, by, held, jobs, gpu_count, rows_of)


def _ended_attempts(conn: Connection, period: Period, by: By) -> list[Held]:
    """The ledger's attempts that overlap the period: ended after it began (the index's
    range) and began before it ended. Up to now, nothing has ended after the end, so no
    more rows are read than the period holds."""
    rows = conn.execute(
        select(
            USAGE.c.owner,
            USAGE.c.gpus,
            # JSON costs a third of reading a row: only where the rows are GPUs
            USAGE.c.gpu_indices if by == "gpu" else null(),
            USAGE.c.queued_at,
            USAGE.c.started_at,
            USAGE.c.ended_at,
            USAGE.c.outcome,
            USAGE.c.lost_gpu_seconds,
        ).where(USAGE.c.ended_at > period.since, USAGE.c.started_at < period.until)
    )
    return [
        Held(owner, gpus, _indices(on), queued, started, ended, lost, LOST_TO.get(outcome))
        for owner, gpus, on, queued, started, ended, outcome, lost in rows
    ]


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
        Held(owner, gpus, _indices(on), queued or created, started, max(now, started))
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
        ended = [Ended(owner, str(status), _indices(on), at) for owner, status, on, at in each]
    else:
        day = func.date(JOB.c.finished_at)  # stored in UTC: the UTC day
        counted = conn.execute(
            select(JOB.c.owner, JOB.c.status, func.min(JOB.c.finished_at), func.count())
            .where(*inside)
            .group_by(JOB.c.owner, JOB.c.status, day)
        )
        ended = [Ended(owner, str(status), (), at, n) for owner, status, at, n in counted]
    return [job for job in ended if job.status in TERMINAL]


def _indices(value: Any) -> tuple[int, ...]:
    """A stored list of GPU indices; what is not one reads as none."""
    if not isinstance(value, list):
        return ()
    return tuple(i for i in value if isinstance(i, int) and not isinstance(i, bool))
