"""Which GPUs a job gets within the fence the reservations draw for it (`bookings.Fence`),
and why it waits when that fence is what keeps it from starting: pure, for `placement`."""

import math
from typing import Protocol

from service.scheduler.bookings import (
    Calendar,
    Fence,
    barred_reason,
    next_opening,
    room_reason,
)
from service.scheduler.gpu_choice import Asks, Policy, Topology, choose
from service.scheduler.host_room import HostAsks, RoomLeft, fits_in
from service.scheduler.occupancy import Occupancy


class FencedAsks(Asks, HostAsks, Protocol):
    """A `placement.Request`, as far as fences go."""

    @property
    def owner(self) -> str: ...
    @property
    def reservation(self) -> str | None: ...


def choose_within(
    occupancy: Occupancy,
    request: Asks,
    fenced: Fence | None,
    topology: Topology,
    policy: Policy = "pack",
    keep: int = 0,
    avoid: tuple[int, ...] = (),
) -> tuple[int, ...] | None:
    """The GPUs `request` gets now within `fenced` (None: anywhere), the GPUs of the
    reservation its owner may use first; None if it fits nowhere it may go."""
    if fenced is None:
        return choose(occupancy, request, topology, policy, keep=keep, avoid=avoid)
    if fenced.prefer:
        view = occupancy.restricted(fenced.prefer)
        chosen = choose(view, request, topology, policy, keep=keep, avoid=avoid)
        if chosen is not None:
            return chosen
    view = occupancy.restricted(fenced.allowed(occupancy.gpus))
    return choose(view, request, topology, policy, keep=keep, avoid=avoid)


def barred_why(
    occupancy: Occupancy,
    calendar: Calendar,
    request: FencedAsks,
    fenced: Fence | None,
    topology: Topology,
) -> str | None:
    """Why a job that fits nowhere it may go waits, if it is the reservations that keep it
    off GPUs it would fit on now (and the longest time limit that would start now); None
    if not."""
    if fenced is None or not fenced.barring:
        return None
    if choose(occupancy, request, topology) is None:
        return None
    now = calendar.now
    opens = next_opening(fenced, now)
    longest = None
    if opens < math.inf:  # would a job that ends before it opens start now?
        before = opens - now - calendar.grace_s - 1
        if before > 0:
            backfill = calendar.fence(request, now + before)
            if choose_within(occupancy, request, backfill, topology) is not None:
                longest = before
    return barred_reason(fenced, now, longest)


def kept_free(room: RoomLeft | None, request: HostAsks, fenced: Fence | None) -> str | None:
    """Why `request` waits if it would take cores or host memory that the reservations it
    runs into keep free for their users; None if it would not."""
    if room is None or fenced is None or not (fenced.keep_cpus or fenced.keep_mb):
        return None
    left = (room.free_cpus - fenced.keep_cpus, room.free_mb - fenced.keep_mb)
    if room.fits(request) and not fits_in(request, *left):
        return room_reason(fenced)
    return None
