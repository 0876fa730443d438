"""A usage report over a period: who held how many GPUs for how long, what came of it, and
how long attempts waited. Pure: held GPU time and ended jobs in, `UsageReport` out."""

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import NamedTuple

from service.usage.public import By, JobCounts, LostGpuHours, QueueWait, UsageReport, UsageRow
from service.usage.waits import Waits

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


class Day(NamedTuple):
    """One owner's usage on one whole UTC day, as the rollup keeps it (`UsageDay`)."""

    day: date
    owner: str
    gpu: int  #: `ALL`, a GPU's index, or `UNKNOWN`
    gpu_seconds: float
    lost_failures_s: float
    lost_preemptions_s: float
    #: jobs that ended that day, by final state
    succeeded: int
    failed: int
    cancelled: int
    timed_out: int
    waits: bytes  #: as `waits.counted` stores them


#: A `Day` of all the owner's attempts; of GPU time whose GPUs are not known.
ALL, UNKNOWN = -1, -2


@dataclass
class _Sums:
    gpu_seconds: float = 0.0
    lost: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    jobs: Counter[str] = field(default_factory=Counter)
    waits: Waits = field(default_factory=Waits)
    reserved_idle: float = 0.0  #: GPU-seconds booked by reservations and left idle


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
    tally = UsageTally(period, by, rows_of)
    for h in held:
        tally.held(h)
    for job in ended:
        tally.ended(job)
    return tally.report(gpu_count)


class UsageTally:
    """A report being added up: attempts and ended jobs counted within a part of the
    period (`within`, by default all of it), and the rollup's whole days."""

    def __init__(self, period: Period, by: By, rows_of: str | None = None) -> None:
        self.period, self.by, self.rows_of = period, by, rows_of
        self.total = _Sums()
        self.rows: dict[Key, _Sums] = {}

    def held(self, h: Held, within: Period | None = None) -> None:
        """An attempt's GPU time inside `within`, and its wait if it started there."""
        window, by = within or self.period, self.by
        mine = self._counts(h.owner)
        for key, share in _spread(window, by, h, h.started_at, h.ended_at):
            self.total.gpu_seconds += share
            if mine:
                _sums(self.rows, key).gpu_seconds += share
        if h.lost_to and h.lost_gpu_seconds > 0 and h.gpus:
            lost_from = h.ended_at - timedelta(seconds=h.lost_gpu_seconds / h.gpus)
            for key, share in _spread(window, by, h, lost_from, h.ended_at):
                self.total.lost[h.lost_to] += share
                if mine:
                    _sums(self.rows, key).lost[h.lost_to] += share
        if window.since <= h.started_at < window.until:
            wait = max(0.0, (h.started_at - h.queued_at).total_seconds())
            self.total.waits.add(wait)
            for key in _keys(by, h.owner, h.gpu_indices, h.started_at) if mine else ():
                _sums(self.rows, key).waits.add(wait)

    def reserved_idle(self, h: Held) -> None:
        """A reserved GPU's stretch that nobody ran on, against the reservation's owner."""
        mine = self._counts(h.owner)
        for key, share in _spread(self.period, self.by, h, h.started_at, h.ended_at):
            self.total.reserved_idle += share
            if mine:
                _sums(self.rows, key).reserved_idle += share

    def ended(self, job: Ended, within: Period | None = None) -> None:
        """A job that ended, if it ended inside `within`."""
        window = within or self.period
        if not window.since <= job.finished_at < window.until:
            return
        self.total.jobs[job.status] += job.count
        if self._counts(job.owner):
            for key in _keys(self.by, job.owner, job.gpu_indices, job.finished_at):
                _sums(self.rows, key).jobs[job.status] += job.count

    def day(self, day: Day) -> None:
        """A whole day of the period, from the rollup: its `ALL` rows make the total and
        the rows by owner or day, the others the rows by GPU."""
        mine = self._counts(day.owner)
        if day.gpu == ALL:
            _add_day(self.total, day)
            if mine and self.by != "gpu":
                _add_day(_sums(self.rows, day.owner if self.by == "owner" else day.day), day)
        elif mine and self.by == "gpu":
            _add_day(_sums(self.rows, None if day.gpu == UNKNOWN else day.gpu), day)

    def _counts(self, owner: str) -> bool:
        """Whether `owner`'s work goes into the rows."""
        return self.rows_of is None or owner == self.rows_of

    def report(self, gpu_count: int) -> UsageReport:
        period, by = self.period, self.by
        box = gpu_count * period.seconds
        return UsageReport(
            since=period.since,
            until=period.until,
            by=by,
            gpus=gpu_count,
            rows_of=self.rows_of,
            rows=[
                _row(by, key, sums, _capacity(period, by, key, gpu_count, box))
                for key, sums in _ordered(period, by, self.rows, gpu_count, self.rows_of)
            ],
            total=_row(by, None, self.total, box),
        )


def _add_day(sums: _Sums, day: Day) -> None:
    sums.gpu_seconds += day.gpu_seconds
    sums.lost["failures"] += day.lost_failures_s
    sums.lost["preemptions"] += day.lost_preemptions_s
    jobs = sums.jobs
    jobs["succeeded"] += day.succeeded
    jobs["failed"] += day.failed
    jobs["cancelled"] += day.cancelled
    jobs["timed_out"] += day.timed_out
    sums.waits.add_day(day.waits)


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
        for day, (a, b) in by_day(start, end):
            yield day, h.gpus * (b - a).total_seconds()
    elif h.gpu_indices:
        each = h.gpus / len(h.gpu_indices) * (end - start).total_seconds()
        yield from ((index, each) for index in h.gpu_indices)
    else:
        yield None, h.gpus * (end - start).total_seconds()


def by_day(start: datetime, end: datetime) -> Iterator[tuple[date, tuple[datetime, datetime]]]:
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
        reserved_idle_gpu_hours=round(sums.reserved_idle / 3600, 6),
        queue_wait=QueueWait(
            attempts=len(sums.waits),
            median_s=_rounded(sums.waits.percentile(50)),
            p95_s=_rounded(sums.waits.percentile(95)),
        ),
    )


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
