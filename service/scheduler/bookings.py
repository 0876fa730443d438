"""Reservations as a plan weighs them (`Booking`: GPUs booked for a window and its users),
and which GPUs each queued job may take now (`Fence`), pure.

- A user of a reservation open now may take its GPUs, and takes them first, leaving the
  other GPUs to everyone else; a job that names it (`spec.reservation`) takes only its
  GPUs, and waits until its window opens.
- Anyone else takes a reservation's GPUs only before its window opens, and only with a
  time limit that ends (grace included) before it does: backfill. A job with no time limit
  never does; once the window is open, nobody else does.
- Outside its window, and once it is over or released, a reservation's GPUs are ordinary,
  and a job that names it is an ordinary job.
"""

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

#: users named in a wait reason before "and N more"
SHOWN_USERS = 4


@dataclass(frozen=True)
class Booking:
    """A reservation not over, as planning reads it; times in seconds on the plan's clock."""

    name: str
    gpus: frozenset[int]
    starts_at: float
    ends_at: float
    users: frozenset[str]  #: its users and its group's members
    #: `paper (ana, bo) 09:00-17:00 UTC`: how wait reasons name it
    label: str = field(default="", compare=False)
    cpus: float = 0.0  #: cores of the box others leave free in its window
    memory_mb: int = 0  #: host memory of the box others leave free in its window

    def is_open(self, now: float) -> bool:
        return self.starts_at <= now < self.ends_at


@dataclass(frozen=True)
class Fence:
    """Which GPUs one job may take now: every GPU but `barred`, or `only` those; those in
    `prefer` first. `waits`: why it may take none at all yet."""

    barred: frozenset[int] = frozenset()
    only: frozenset[int] | None = None
    prefer: frozenset[int] = frozenset()
    #: the reservations that bar GPUs, for the wait reason
    barring: tuple[Booking, ...] = ()
    #: the reservation the job runs in (it names it, and it is open)
    within: Booking | None = None
    waits: str | None = None

    @property
    def keep_cpus(self) -> float:
        """Cores the job must leave free: those of the reservations it runs into."""
        return sum(b.cpus for b in self.barring)

    @property
    def keep_mb(self) -> int:
        """Host memory the job must leave free, likewise."""
        return sum(b.memory_mb for b in self.barring)

    @property
    def key(self) -> tuple[frozenset[int], frozenset[int] | None, frozenset[int]]:
        """What decides where a job fits: jobs of one shape and one key fit alike."""
        return self.barred, self.only, self.prefer

    def allowed(self, gpus: Collection[int]) -> frozenset[int]:
        """Which of `gpus` the job may take."""
        return frozenset(gpus if self.only is None else self.only) - self.barred


class Asker(Protocol):
    """What a fence is drawn for (a `placement.Request`)."""

    @property
    def owner(self) -> str: ...
    @property
    def reservation(self) -> str | None: ...


def fence(
    bookings: Sequence[Booking], request: Asker, ends_at: float | None, now: float
) -> Fence | None:
    """Which GPUs `request`, running until `ends_at` (None: no time limit), may take now;
    None if no reservation touches it."""
    if not bookings:
        return None
    if request.reservation is not None:
        named = next((b for b in bookings if b.name == request.reservation), None)
        if named is not None:
            return _inside(named, request.owner, now)
    barred: set[int] = set()
    prefer: set[int] = set()
    barring = []
    for booking in bookings:
        if request.owner in booking.users:
            if booking.is_open(now):
                prefer |= booking.gpus
        elif booking.is_open(now) or ends_at is None or ends_at > booking.starts_at:
            barred |= booking.gpus
            barring.append(booking)
    if not barred and not prefer:
        return None
    return Fence(frozenset(barred), None, frozenset(prefer - barred), tuple(barring))


@dataclass(frozen=True)
class Calendar:
    """The reservations a plan weighs, on its clock: `fence` for each job."""

    bookings: Sequence[Booking] = ()
    now: float = 0.0
    grace_s: float = 0.0  #: how long after its time limit a job may still run

    def fence(self, request: Asker, ends_at: float | None) -> Fence | None:
        return fence(self.bookings, request, ends_at, self.now) if self.bookings else None


def _inside(booking: Booking, owner: str, now: float) -> Fence:
    """The fence of a job that names `booking`."""
    if owner not in booking.users:
        return Fence(
            waits=f"{owner} is not a user of reservation {booking.label}: the job waits "
            "until the reservation is over, or until its owner adds you "
            "(`gpuq reserve --change`)"
        )
    if now < booking.starts_at:
        return Fence(waits=f"waiting for reservation {booking.label} to open")
    return Fence(only=booking.gpus, within=booking)


def room_reason(fenced: Fence) -> str:
    """`4 cores and 32 GiB of host memory are reserved for paper (...) ...; what is left does
    not fit this job`."""
    held = [b for b in fenced.barring if b.cpus or b.memory_mb]
    said = "; ".join(
        f"{_held_share(b)} {'is' if _one(b) else 'are'} reserved for {b.label}" for b in held
    )
    return f"{said}; what is left of the box does not fit this job"


def _held_share(booking: Booking) -> str:
    parts = []
    if booking.cpus:
        parts.append(f"{booking.cpus:g} core{'s' if booking.cpus != 1 else ''}")
    if booking.memory_mb:
        parts.append(f"{booking.memory_mb / 1024:.1f}".removesuffix(".0") + " GiB of host memory")
    return " and ".join(parts)


def _one(booking: Booking) -> bool:
    return not booking.memory_mb and booking.cpus == 1


def barred_reason(fenced: Fence, now: float, backfill_s: float | None) -> str:
    """`GPUs 0-3 are reserved for paper (ana, bo) 09:00-17:00 UTC; a job with --time
    under 2h10m would start now`: why a job the reservations keep off GPUs it would fit
    on waits; `backfill_s`: the longest time limit that would start now, if any would."""
    said = "; ".join(
        f"{gpu_list(b.gpus)} {'is' if len(b.gpus) == 1 else 'are'} reserved for {b.label}"
        for b in fenced.barring
    )
    if backfill_s is not None and backfill_s >= 60:
        said += f"; a job with --time under {as_span(backfill_s)} would start now"
    return said


def next_opening(fenced: Fence, now: float) -> float:
    """When the first reservation that bars GPUs and is not open yet opens (inf: none)."""
    return min((b.starts_at for b in fenced.barring if b.starts_at > now), default=math.inf)


def gpu_list(indices: Collection[int]) -> str:
    """`GPU 7`, `GPUs 0-3`, `GPUs 0, 2, 5`."""
    ordered = sorted(indices)
    if len(ordered) == 1:
        return f"GPU {ordered[0]}"
    if ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"GPUs {ordered[0]}-{ordered[-1]}"
    return "GPUs " + ", ".join(map(str, ordered))


def as_span(seconds: float) -> str:
    """`2h10m`, `45m`, `1d2h`: as `--time` takes it, rounded down to the minute."""
    minutes = int(seconds // 60)
    days, minutes = divmod(minutes, 1440)
    hours, minutes = divmod(minutes, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m")]
    return "".join(f"{n}{unit}" for n, unit in parts if n) or "0m"


def label(
    name: str, users: Collection[str], group: str | None, starts: float, ends: float, now: float
) -> str:
    """`paper (ana, bo) 09:00-17:00 UTC`, with the days where the window is not today's."""
    names = sorted(users)
    who = names[:SHOWN_USERS] + (
        [f"{len(names) - SHOWN_USERS} more"] if len(names) > SHOWN_USERS else []
    )
    if group:
        who.append(f"group {group}")
    return f"{name} ({', '.join(who)}) {window_text(starts, ends, now)}"


def window_text(starts: float, ends: float, now: float) -> str:
    """`09:00-17:00 UTC` today; `Fri 12-04 09:00 - Sat 12-05 17:00 UTC` on other days."""
    a, b, today = (datetime.fromtimestamp(t, UTC) for t in (starts, ends, now))
    if a.date() == b.date() == today.date():
        return f"{a:%H:%M}-{b:%H:%M} UTC"
    if a.date() == b.date():
        return f"{a:%a %m-%d %H:%M}-{b:%H:%M} UTC"
    return f"{a:%a %m-%d %H:%M} - {b:%a %m-%d %H:%M} UTC"
