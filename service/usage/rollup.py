"""The usage rollup: each UTC day's usage per owner (`usage_day`), of all their attempts and
per GPU, and the days each ended attempt touched (`attempt_day`). Both are written in the
transactions that end attempts (`add_attempt`, from the ledger) and jobs (`add_ended_job`,
from the state gate), so a report over a year reads a row per day, owner and GPU, and the
attempts of its two part-days by the days' keys.

`rebuild` makes both again from the ledger and the jobs (the migration that made them, and
the benchmarks' filled databases).
"""

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection, Insert, Table, bindparam, delete, insert, null, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session

from gpuq.contract.states import TERMINAL
from service.store.tables import Job
from service.store.usage_tables import AttemptDay, AttemptUsage, UsageDay
from service.usage import waits
from service.usage.report import ALL, UNKNOWN, Day, Held, by_day

DAY_ROW: Table = UsageDay.__table__  # type: ignore[attr-defined]
ATTEMPT_DAY: Table = AttemptDay.__table__  # type: ignore[attr-defined]
USAGE: Table = AttemptUsage.__table__  # type: ignore[attr-defined]
JOB: Table = Job.__table__  # type: ignore[attr-defined]

#: The final states a report counts, each a column of `usage_day`.
COUNTED = ("succeeded", "failed", "cancelled", "timed_out")
_SUMS = ("gpu_seconds", "lost_failures_s", "lost_preemptions_s", *COUNTED)
_LOST_COLUMN = {"failures": "lost_failures_s", "preemptions": "lost_preemptions_s"}


@dataclass
class _Change:
    """What one ended attempt or job adds to one `usage_day` row."""

    sums: defaultdict[str, float] = field(default_factory=lambda: defaultdict(int))
    waits: list[float] = field(default_factory=list)


Changes = defaultdict[tuple[date, str, int], _Change]


def add_attempt(session: Session, usage_id: int, h: Held) -> None:
    """Adds the ended attempt `h`, the ledger's row `usage_id`, to the rollup."""
    changes: Changes = defaultdict(_Change)
    days = _attempt_changes(h, changes)
    session.connection().execute(
        insert(ATTEMPT_DAY), [{"day": day, "usage_id": usage_id} for day in days]
    )
    _apply(session, changes)


def add_ended_job(
    session: Session, owner: str, status: str, gpu_indices: Sequence[int], finished_at: datetime
) -> None:
    """Counts a job that reached its final state `status` (on the GPUs of its last attempt)."""
    changes: Changes = defaultdict(_Change)
    _job_changes(owner, status, gpu_indices, finished_at, changes)
    _apply(session, changes)


def days_of(start: datetime, end: datetime) -> list[date]:
    """The UTC days [start, end) touches; the start's day for an empty span."""
    return [day for day, _ in by_day(start, end)] or [_utc_day(start)]


def _attempt_changes(h: Held, changes: Changes) -> list[date]:
    """Adds `h` to `changes`; the days it touched."""
    for day, (a, b) in by_day(h.started_at, h.ended_at):
        for gpu, gpus in _cuts(h):
            changes[day, h.owner, gpu].sums["gpu_seconds"] += gpus * (b - a).total_seconds()
    if h.lost_to and h.lost_gpu_seconds > 0 and h.gpus:
        column = _LOST_COLUMN[h.lost_to]
        lost_from = h.ended_at - timedelta(seconds=h.lost_gpu_seconds / h.gpus)
        for day, (a, b) in by_day(max(lost_from, h.started_at), h.ended_at):
            for gpu, gpus in _cuts(h):
                changes[day, h.owner, gpu].sums[column] += gpus * (b - a).total_seconds()
    wait = max(0.0, (h.started_at - h.queued_at).total_seconds())
    start_day = _utc_day(h.started_at)
    for gpu in (ALL, *h.gpu_indices):
        changes[start_day, h.owner, gpu].waits.append(wait)
    return days_of(h.started_at, h.ended_at)


def _cuts(h: Held) -> Iterator[tuple[int, float]]:
    """The rows an attempt's GPU time goes to, each with how many GPUs of it: all of them,
    then each GPU's share (or the unknown GPUs')."""
    if not h.gpus:
        return
    yield ALL, h.gpus
    if h.gpu_indices:
        yield from ((index, h.gpus / len(h.gpu_indices)) for index in h.gpu_indices)
    else:
        yield UNKNOWN, h.gpus


def _job_changes(
    owner: str, status: str, gpu_indices: Sequence[int], at: datetime, changes: Changes
) -> None:
    if status in COUNTED:
        for gpu in (ALL, *gpu_indices):
            changes[_utc_day(at), owner, gpu].sums[status] += 1


def _apply(session: Session, changes: Changes) -> None:
    """Adds each change to its row: the sums by one upsert of them all (which locks the
    rows on PostgreSQL), then the waits read, counted and written back under that lock."""
    connection = session.connection()
    ordered = sorted(changes.items())  # one order for every writer: no deadlocks
    rows = [
        {"day": day, "owner": owner, "gpu": gpu, **_zeros(), **change.sums}
        for (day, owner, gpu), change in ordered
    ]
    connection.execute(_adding(connection.dialect.name), rows)
    counted = [(key, change.waits) for key, change in ordered if change.waits]
    if not counted:
        return
    ((day, owner, _), _), *_ = counted  # an attempt's waits: its start day's rows
    stored = dict(connection.execute(_WAITS, {"on_day": day, "of_owner": owner}).all())
    connection.execute(
        _SET_WAITS,
        [
            {"on_day": day, "of_owner": owner, "on_gpu": gpu,
             "waits": waits.counted(seconds, stored.get(gpu, b""))}
            for (day, owner, gpu), seconds in counted
        ],
    )  # fmt: skip


@lru_cache(maxsize=2)
def _adding(dialect: str) -> Insert:
    """The upsert that adds a row's sums to the stored ones, for `dialect`."""
    statement = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(DAY_ROW)
    return statement.on_conflict_do_update(
        index_elements=[DAY_ROW.c.day, DAY_ROW.c.owner, DAY_ROW.c.gpu],
        set_={c: DAY_ROW.c[c] + statement.excluded[c] for c in _SUMS},
    )


_KEY = (DAY_ROW.c.day == bindparam("on_day"), DAY_ROW.c.owner == bindparam("of_owner"))
_WAITS = select(DAY_ROW.c.gpu, DAY_ROW.c.waits).where(*_KEY)
_SET_WAITS = (
    update(DAY_ROW)
    .where(*_KEY, DAY_ROW.c.gpu == bindparam("on_gpu"))
    .values(waits=bindparam("waits"))
)


def whole_days(conn: Connection, first: date, end: date, by: str) -> list[Day]:
    """The rollup's rows of the days from `first` to `end` (excluded) that a report cut
    `by` owner, day or GPU reads: each owner's `ALL` rows, and for `gpu` their rows per GPU
    too. Only a report by day reads the rows' days (a year of dates costs 20 ms to read)."""
    where = [DAY_ROW.c.day >= first, DAY_ROW.c.day < end]
    if by != "gpu":
        where.append(DAY_ROW.c.gpu == ALL)
    columns = [*_DAY] if by == "day" else [null(), *_DAY[1:]]
    return [Day(*row) for row in conn.execute(select(*columns).where(*where)).all()]


#: `Day`'s fields, in order
_DAY = [DAY_ROW.c[name] for name in Day._fields]


def rebuild(conn: Connection, batch: int = 20_000) -> None:
    """Makes the rollup again from the whole ledger and every ended job, in the caller's
    transaction."""
    conn.execute(delete(ATTEMPT_DAY))
    conn.execute(delete(DAY_ROW))
    changes: Changes = defaultdict(_Change)
    touched: list[dict[str, object]] = []
    for row in conn.execute(select(*LEDGER)).yield_per(batch):
        for day in _attempt_changes(held(row), changes):
            touched.append({"day": day, "usage_id": row.id})
        if len(touched) >= batch:
            conn.execute(insert(ATTEMPT_DAY), touched)
            touched.clear()
    if touched:
        conn.execute(insert(ATTEMPT_DAY), touched)
    ended = select(JOB.c.owner, JOB.c.status, JOB.c.assigned_gpus, JOB.c.finished_at).where(
        JOB.c.finished_at.is_not(None)
    )
    for owner, status, on, at in conn.execute(ended).yield_per(batch):
        if status in TERMINAL:
            _job_changes(owner, str(status), indices(on), at, changes)
    rows = [
        {"day": day, "owner": owner, "gpu": gpu, **_zeros(), **change.sums,
         "waits": waits.counted(change.waits)}
        for (day, owner, gpu), change in changes.items()
    ]  # fmt: skip
    for n in range(0, len(rows), batch):
        conn.execute(insert(DAY_ROW), rows[n : n + batch])


def _zeros() -> dict[str, float]:
    return dict.fromkeys(_SUMS, 0)


#: What a report reads of a ledger row (`held`).
LEDGER = (
    USAGE.c.id,
    USAGE.c.owner,
    USAGE.c.gpus,
    USAGE.c.gpu_indices,
    USAGE.c.queued_at,
    USAGE.c.started_at,
    USAGE.c.ended_at,
    USAGE.c.outcome,
    USAGE.c.lost_gpu_seconds,
)


def held(row: Any) -> Held:
    """A ledger row (with the `LEDGER` columns) as a report counts it."""
    return Held(
        owner=row.owner,
        gpus=row.gpus,
        gpu_indices=indices(row.gpu_indices),
        queued_at=row.queued_at,
        started_at=row.started_at,
        ended_at=row.ended_at,
        lost_gpu_seconds=row.lost_gpu_seconds,
        lost_to=LOST_TO.get(row.outcome),
    )


#: Whose loss a ledger row's `lost_gpu_seconds` is, by its outcome.
LOST_TO = {"failed": "failures", "preempted": "preemptions"}


def indices(value: object) -> tuple[int, ...]:
    """A stored list of GPU indices; what is not one reads as none."""
    if not isinstance(value, list):
        return ()
    return tuple(i for i in value if isinstance(i, int) and not isinstance(i, bool))


def _utc_day(at: datetime) -> date:
    return at.astimezone(UTC).date()
