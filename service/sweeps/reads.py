"""Reading sweeps: one with its members and their epoch metrics, or a page of them with
their members counted by state."""

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Table, func, select
from sqlmodel import Session, col
from sqlmodel import select as select_model

from gpuq.contract.states import JobStatus
from service.errors import NotFound
from service.jobs.writes import JOB
from service.store.db import Database
from service.store.pages import newest_first
from service.store.tables import JobMetric, Sweep
from service.sweeps.leaderboard import Epochs

METRIC: Table = JobMetric.__table__  # type: ignore[attr-defined]

#: what a sweep's reads need of each member
MEMBER_COLUMNS = (
    JOB.c.id,
    JOB.c.name,
    JOB.c.status,
    JOB.c.reason,
    JOB.c.message,
    JOB.c.params,
    JOB.c.held,
    JOB.c.assigned_gpus,
    JOB.c.started_at,
    JOB.c.finished_at,
)


def load_sweep(session: Session, sweep_id: int) -> Sweep:
    sweep = session.get(Sweep, sweep_id)
    if sweep is None:
        raise NotFound(f"sweep {sweep_id} not found")
    return sweep


def get_sweep(db: Database, sweep_id: int) -> Sweep:
    with db.read() as session:
        return load_sweep(session, sweep_id)


def list_sweeps(
    db: Database, *, owner: str | None = None, limit: int = 50, cursor: str | None = None
) -> tuple[list[Sweep], str | None]:
    """Newest first, a page at a time."""
    query = select_model(Sweep)
    if owner is not None:
        query = query.where(Sweep.owner == owner)
    return newest_first(db, query, Sweep.id, limit=limit, cursor=cursor)


def members(db: Database, sweep_id: int) -> list[Any]:
    """The sweep's members (rows of `MEMBER_COLUMNS`), in the order they were made."""
    query = select(*MEMBER_COLUMNS).where(JOB.c.sweep_id == sweep_id).order_by(JOB.c.id)
    with db.read() as session:
        return list(session.connection().execute(query))


def member_epochs(db: Database, sweep_id: int) -> dict[int, Epochs]:
    """Each member's epoch metrics: job id → epoch → {name: value}."""
    query = (
        select(METRIC.c.job_id, METRIC.c.epoch, METRIC.c["values"])
        .join(JOB, JOB.c.id == METRIC.c.job_id)
        .where(JOB.c.sweep_id == sweep_id, METRIC.c.step == 0)
    )
    found: dict[int, dict[int, Any]] = {}
    with db.read() as session:
        for job_id, epoch, values in session.connection().execute(query):
            found.setdefault(job_id, {})[epoch] = values if isinstance(values, dict) else {}
    return dict(found)


@dataclass
class Tally:
    """A sweep's members counted: by state, how many ever started, the last end."""

    states: Counter[str] = field(default_factory=Counter)
    started: int = 0
    finished_at: datetime | None = None


def tally_of(members: Sequence[Any]) -> Tally:
    """The counts of a sweep whose members (rows of `MEMBER_COLUMNS`) are already read."""
    tally = Tally()
    for row in members:
        tally.states[JobStatus(row.status).value] += 1
        tally.started += row.started_at is not None
        if row.finished_at is not None:
            tally.finished_at = max(row.finished_at, tally.finished_at or row.finished_at)
    return tally


def tallies(db: Database, sweep_ids: Sequence[int]) -> dict[int, Tally]:
    """Each sweep's members counted, in one query for all of them."""
    if not sweep_ids:
        return {}
    query = (
        select(
            JOB.c.sweep_id,
            JOB.c.status,
            func.count(),
            func.count(JOB.c.started_at),
            func.max(JOB.c.finished_at),
        )
        .where(col(JOB.c.sweep_id).in_(sweep_ids))
        .group_by(JOB.c.sweep_id, JOB.c.status)
    )
    found = {i: Tally() for i in sweep_ids}
    with db.read() as session:
        for sweep_id, status, count, started, finished in session.connection().execute(query):
            tally = found[sweep_id]
            tally.states[JobStatus(status).value] += count
            tally.started += started
            if finished is not None:
                tally.finished_at = max(finished, tally.finished_at or finished)
    return found
