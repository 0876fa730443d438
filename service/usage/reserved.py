"""GPU time booked and left idle: for each reservation whose window overlaps a report's
period, the part of the window (up to its release, and up to now) in which nobody ran on
each of its GPUs, counted against whoever booked it (`UsageRow.reserved_idle_gpu_hours`).
Reservations are few, so their windows are read directly, with the attempts that touched
each window's UTC days (by `attempt_day`'s key: a window a year back costs what today's
does) and the jobs running now; a Slurm reservation's nodes are Slurm's to pick, so it is
not counted here."""

from collections.abc import Iterator
from datetime import datetime

from sqlalchemy import Connection, Table, or_, select

from gpuq.contract.states import ACTIVE
from service.store.reservation_tables import Reservation
from service.store.tables import Job
from service.store.usage_tables import AttemptUsage
from service.usage import rollup
from service.usage.report import Held, Period

RESERVATION: Table = Reservation.__table__  # type: ignore[attr-defined]
USAGE: Table = AttemptUsage.__table__  # type: ignore[attr-defined]
JOB: Table = Job.__table__  # type: ignore[attr-defined]

Span = tuple[datetime, datetime]


def idle_reserved(conn: Connection, period: Period, now: datetime) -> list[Held]:
    """Each stretch of a reserved GPU's window in `period` that nobody ran on, as one GPU
    held by the reservation's owner."""
    r = RESERVATION.c
    # Its end, min(ends_at, released_at), after the period's start: `ends_at` by its index.
    rows = conn.execute(
        select(r.owner, r.gpu_indices, r.starts_at, r.ends_at, r.released_at).where(
            r.ends_at > period.since,
            or_(r.released_at.is_(None), r.released_at > period.since),
            r.starts_at < min(period.until, now),
            r.slurm_name.is_(None),
        )
    ).all()
    found = []
    for owner, gpus, starts, ends, released in rows:
        window = period.clip(starts, min(ends, released or ends, now))
        if window[1] <= window[0]:
            continue
        busy = _busy(conn, window, now)
        for gpu in rollup.indices(gpus):
            for a, b in _gaps(window, busy.get(gpu, [])):
                found.append(Held(owner, 1, (gpu,), a, a, b))
    return found


def _busy(conn: Connection, window: Span, now: datetime) -> dict[int, list[Span]]:
    """GPU → when attempts and running jobs held it, within `window`."""
    since, until = window
    spans: dict[int, list[Span]] = {}
    days = rollup.days_of(since, until)
    touched = rollup.ATTEMPT_DAY
    # An attempt of two of the window's days comes twice: the union of spans takes it once.
    attempts = conn.execute(
        select(USAGE.c.gpu_indices, USAGE.c.started_at, USAGE.c.ended_at)
        .join(touched, touched.c.usage_id == USAGE.c.id)
        .where(touched.c.day.between(days[0], days[-1]))
    )
    running = conn.execute(
        select(JOB.c.assigned_gpus, JOB.c.started_at).where(
            JOB.c.status.in_(ACTIVE), JOB.c.started_at.is_not(None), JOB.c.started_at < until
        )
    )
    held = [*attempts, *((gpus, started, now) for gpus, started in running)]
    for gpus, started, ended in held:
        if ended <= since or started >= until:
            continue
        for gpu in rollup.indices(gpus):
            spans.setdefault(gpu, []).append((max(started, since), min(ended, until)))
    return spans


def _gaps(window: Span, busy: list[Span]) -> Iterator[Span]:
    """The parts of `window` no span of `busy` covers, in order."""
    at, end = window
    for a, b in sorted(busy):
        if a > at:
            yield at, min(a, end)
        at = max(at, b)
        if at >= end:
            return
    if at < end:
        yield at, end
