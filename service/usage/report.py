"""A usage report over a period: who held how many GPUs for how long, what came of it, and
how long attempts waited. Pure: held GPU time and ended jobs in, `UsageReport` out."""

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from service.usage.public import By, JobCounts, LostGpuHours, QueueWait, UsageReport, UsageRow

#: What a row is of: an owner, a UTC day, a GPU index (None: GPUs not known).
Key = str | date | int | None
DAY = timedelta(days=1)


@dataclass(frozen=True)
class Period:
    since: datetime  #: included
    until: datetime  #: excluded

    @property
    def seconds(self) -> float:
        return (self.until - self.since).total_seconds()

    def clip(self, start: datetime, end: datetime) -> tuple[datetime, datetime]:
        """The part of [start, end) inside the period (empty: start >= end)."""
        return max(start, self.since), min(end, self.until)

    def days(self) -> list[date]:
        """Every UTC day the period touches, in order."""
        first, last = self.since.date(), (self.until - timedelta(microseconds=1)).date()
        return [first + timedelta(days=n) for n in range((last - first).days + 1)]


@dataclass(frozen=True)
class Held:
    """One attempt's hold on its GPUs: ended (the ledger's row) or still going (to now)."""

    owner: str
    gpus: int
    gpu_indices: tuple[int, ...]
    queued_at: datetime  #: when it could have started
    started_at: datetime
    ended_at: datetime
    lost_gpu_seconds: float = 0.0  #: the end of it that nothing builds on
    lost_to: str | None = None  #: `failures` or `preemptions`


@dataclass(frozen=True)
class Ended:
    """A job that reached its final state."""

    owner: str
    status: str
    gpu_indices: tuple[int, ...]  #: the GPUs its last attempt held
    finished_at: datetime
    count: int = 1  #: how many jobs this stands for, of one owner, state and UTC day


@dataclass
class _Sums:
    gpu_seconds: float = 0.0
    lost: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    jobs: Counter[str] = field(default_factory=Counter)
    waits: list[float] = field(default_factory=list)


def build(
    period: Period,
    by: By,
    held: Iterable[Held],
    ended: Iterable[Ended],
    gpu_count: int,
    rows_of: str | None = None,
) -> UsageReport:
    """The report of `period` cut `by` owner, UTC day or GPU; the rows count only
    `rows_of`'s work when given (a member's view), the total always everyone's."""
    total = _Sums()
    rows: dict[Key, _Sums] = {}
    for h in held:
        mine = rows_of is None or h.owner == rows_of
        for key, share in _spread(period, by, h, h.started_at, h.ended_at):
            total.gpu_seconds += share
            if mine:
                _sums(rows, key).gpu_seconds += share
        if h.lost_to and h.lost_gpu_seconds > 0 and h.gpus:
            lost_from = h.ended_at - timedelta(seconds=h.lost_gpu_seconds / h.gpus)
            for key, share in _spread(period, by, h, lost_from, h.ended_at):
                total.lost[h.lost_to] += share
                if mine:
                    _sums(rows, key).lost[h.lost_to] += share
        if period.since <= h.started_at < period.until:
            wait = max(0.0, (h.started_at - h.queued_at).total_seconds())
            total.waits.append(wait)
            for key in _keys(by, h.owner, h.gpu_indices, h.started_at) if mine else ():
                _sums(rows, key).waits.append(wait)
    for job in ended:
        if not period.since <= job.finished_at < period.until:
            continue
        total.jobs[job.status] += job.count
        if rows_of is None or job.owner == rows_of:
            for key in _keys(by, job.owner, job.gpu_indices, job.finished_at):
                _sums(rows, key).jobs[job.status] += job.count
    box = gpu_count * period.seconds
    return UsageReport(
        since=period.since,
        until=period.until,
        by=by,
        gpus=gpu_count,
        rows_of=rows_of,
        rows=[
            _row(by, key, sums, _capacity(period, by, key, gpu_count, box))
            for key, sums in _ordered(period, by, rows, gpu_count, rows_of)
        ],
        total=_row(by, None, total, box),
    )


def _sums(rows: dict[Key, _Sums], key: Key) -> _Sums:
    found = rows.get(key)
    if found is None:
        found = rows[key] = _Sums()
    return found


def _spread(
    period: Period, by: By, h: Held, start: datetime, end: datetime
) -> Iterator[tuple[Key, float]]:
    """GPU-seconds of `h`'s GPUs from `start` to `end` inside the period, per row."""
    start, end = period.clip(start, end)
    if end <= start or not h.gpus:
        return
    if by == "owner":
        yield h.owner, h.gpus * (end - start).total_seconds()
    elif by == "day":
        for day, (a, b) in _by_day(start, end):
            yield day, h.gpus * (b - a).total_seconds()
    elif h.gpu_indices:
        each = h.gpus / len(h.gpu_indices) * (end - start).total_seconds()
        yield from ((index, each) for index in h.gpu_indices)
    else:
        yield None, h.gpus * (end - start).total_seconds()


def _by_day(start: datetime, end: datetime) -> Iterator[tuple[date, tuple[datetime, datetime]]]:
    """[start, end) cut at UTC midnights."""
    while start < end:
        midnight = datetime.combine(start.astimezone(UTC).date(), time(), UTC) + DAY
        yield start.astimezone(UTC).date(), (start, min(end, midnight))
        start = midnight


def _keys(by: By, owner: str, gpu_indices: Sequence[int], at: datetime) -> list[Key]:
    """The rows of something that happened at `at`: a start, or an end."""
    if by == "owner":
        return [owner]
    if by == "day":
        return [at.astimezone(UTC).date()]
    return list(gpu_indices)


def _ordered(
    period: Period, by: By, rows: dict[Key, _Sums], gpu_count: int, rows_of: str | None
) -> list[tuple[Key, _Sums]]:
    """Owners by GPU time, most first (a member's own row even if empty); every day of the
    period; every GPU gpuq knows and any other one used, by index (unknown GPUs last)."""
    if by == "owner":
        if rows_of is not None:
            rows.setdefault(rows_of, _Sums())
        return sorted(rows.items(), key=lambda kv: (-kv[1].gpu_seconds, str(kv[0])))
    if by == "day":
        return [(day, rows.get(day, _Sums())) for day in period.days()]
    indices = sorted({*range(gpu_count), *(k for k in rows if isinstance(k, int))})
    listed: list[tuple[Key, _Sums]] = [(i, rows.get(i, _Sums())) for i in indices]
    return listed + ([(None, rows[None])] if None in rows else [])


def _capacity(period: Period, by: By, key: Key, gpu_count: int, box: float) -> float:
    """GPU-seconds the box had in a row's time: that day's part of the period on a day row,
    the whole period on the others."""
    if by != "day" or not isinstance(key, date):
        return box
    since, until = period.clip(
        datetime.combine(key, time(), UTC), datetime.combine(key, time(), UTC) + DAY
    )
    return gpu_count * (until - since).total_seconds()


def _row(by: By, key: Key, sums: _Sums, capacity: float) -> UsageRow:
    return UsageRow(
        owner=key if by == "owner" and isinstance(key, str) else None,
        day=key if isinstance(key, date) else None,
        gpu=key if by == "gpu" and isinstance(key, int) else None,
        gpu_hours=round(sums.gpu_seconds / 3600, 6),
        share=round(sums.gpu_seconds / capacity, 6) if capacity > 0 else None,
        jobs=JobCounts(
            succeeded=sums.jobs["succeeded"],
            failed=sums.jobs["failed"],
            cancelled=sums.jobs["cancelled"],
            timed_out=sums.jobs["timed_out"],
        ),
        lost_gpu_hours=LostGpuHours(
            failures=round(sums.lost["failures"] / 3600, 6),
            preemptions=round(sums.lost["preemptions"] / 3600, 6),
        ),
        queue_wait=QueueWait(
            attempts=len(sums.waits),
            median_s=_rounded(percentile(sums.waits, 50)),
            p95_s=_rounded(percentile(sums.waits, 95)),
        ),
    )


def percentile(values: Sequence[float], pct: float) -> float | None:
    """The `pct`th percentile, interpolated between the nearest two values (numpy's
    default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
