"""What a booking must pass, pure: no clash with the reservations whose windows overlap
it, within the box, and within its owner's `GPUQ_MAX_RESERVED_GPU_HOURS`."""

from collections.abc import Sequence
from datetime import datetime

from service.errors import Conflict, Forbidden
from service.host import HostSize
from service.scheduler.bookings import gpu_list, label
from service.store.reservation_tables import Reservation


def overlapping(
    others: Sequence[Reservation], starts: datetime, ends: datetime
) -> list[Reservation]:
    """The reservations among `others` whose windows overlap `[starts, ends)`."""
    return [o for o in others if o.starts_at < ends and starts < o.ends_at]


def named_as(row: Reservation, now: datetime) -> str:
    """`paper (ana, bo) 09:00-17:00 UTC`."""
    times = (row.starts_at.timestamp(), row.ends_at.timestamp(), now.timestamp())
    return label(row.name, row.users, row.group, *times)


def choose_gpus(
    box: Sequence[int],
    asked: int,
    named: Sequence[int] | None,
    clashing: Sequence[Reservation],
    now: datetime,
) -> list[int]:
    """The GPUs the booking holds: `named`, or the first `asked` of `box` free of the
    `clashing` reservations; `Conflict` naming what holds them."""
    taken = {g for o in clashing for g in o.gpu_indices}
    free = [g for g in box if g not in taken]
    if named is not None:
        held = [o for o in clashing if set(o.gpu_indices) & set(named)]
        if held:
            both = sorted(set(held[0].gpu_indices) & set(named))
            raise Conflict(_clash(both, held[0], free, box, now))
        return sorted(named)
    if len(free) < asked:
        first = clashing[0]
        raise Conflict(_clash(first.gpu_indices, first, free, box, now))
    return free[:asked]


def _clash(
    gpus: Sequence[int], row: Reservation, free: Sequence[int], box: Sequence[int], now: datetime
) -> str:
    verb = "is" if len(gpus) == 1 else "are"
    return (
        f"{gpu_list(gpus)} {verb} reserved for {named_as(row, now)}; {len(free)} of "
        f"{len(box)} GPUs are free of reservations then" + (f" ({gpu_list(free)})" if free else "")
    )


def check_room(
    cpus: float | None,
    memory_mb: int | None,
    clashing: Sequence[Reservation],
    box: HostSize | None,
    now: datetime,
) -> None:
    """`Conflict` if the cores or host memory booked, with those the `clashing`
    reservations book, pass what the box gives jobs."""
    if box is None or not (cpus or memory_mb):
        return
    booked_cpus = sum(o.cpus or 0 for o in clashing) + (cpus or 0)
    booked_mb = sum(o.host_memory_mb or 0 for o in clashing) + (memory_mb or 0)
    if booked_cpus <= box.cpus and booked_mb <= box.memory_mb:
        return
    others = ", ".join(named_as(o, now) for o in clashing if o.cpus or o.host_memory_mb)
    raise Conflict(
        f"the box gives jobs {box.cpus:g} cores and {box.memory_mb} MiB of host memory; "
        f"with this one, reservations would hold {booked_cpus:g} cores and {booked_mb} MiB "
        f"then" + (f" ({others})" if others else "")
    )


def gpu_hours(row_gpus: int, starts: datetime, ends: datetime, now: datetime) -> float:
    """GPU-hours of a booking still to come: from now (or its start) to its end."""
    return row_gpus * max(0.0, (ends - max(starts, now)).total_seconds()) / 3600


def check_limit(
    mine: Sequence[Reservation],
    gpus: int,
    starts: datetime,
    ends: datetime,
    most: float,
    now: datetime,
) -> None:
    """`Forbidden` if booking this would hold its owner, not an admin, past `most`
    GPU-hours booked (their reservations not over, `mine`, from now on)."""
    held = sum(gpu_hours(len(o.gpu_indices), o.starts_at, o.ends_at, now) for o in mine)
    total = held + gpu_hours(gpus, starts, ends, now)
    if total > most + 1e-9:
        raise Forbidden(
            f"this would hold {total:.1f} GPU-hours booked ({held:.1f} already); "
            f"GPUQ_MAX_RESERVED_GPU_HOURS is {most:g} for users who are not admins: book "
            "fewer GPUs or a shorter window, or ask an admin"
        )
