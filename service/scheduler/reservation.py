"""The head's reservation and what may start ahead of it (EASY backfill), pure.

The first GPU job that cannot start (the plan's *head*) is promised the earliest moment
its GPUs, and its share of the box's cores and host memory, would be free by the running
jobs' time limits. A job behind it may start now only if it cannot push that moment back:
it ends first, or it takes neither the head's GPUs nor more of the box than the head
leaves spare (`host_room.RoomLeft`).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from service.scheduler.gpu_choice import Asks, Topology, choose
from service.scheduler.host_room import HostAsks, HostRoom, RoomLeft
from service.scheduler.occupancy import Claim, GpuSlot, Occupancy
from service.scheduler.wait_reasons import DELAYS_HEAD, UNBOUNDED


class Wants(Asks, HostAsks, Protocol):
    """What a job asks of the GPUs and of the box (a `placement.Request`)."""


@dataclass(frozen=True)
class HeadStart:
    """The head job's earliest start: when (inf if a running job has no time limit) and
    on which GPUs (None if it fits nowhere even on an empty box)."""

    start: float
    gpus: tuple[int, ...] | None


def head_reservation(
    occupancy: Occupancy, left: RoomLeft | None, request: Wants, topology: Topology
) -> HeadStart:
    """The earliest moment (a claim's or a hold's end) by which `request`'s GPUs and its
    share of the box would both be free."""
    ends = {h.ends_at for hs in occupancy.claims_on.values() for h in hs if h.ends_at}
    if left is not None:
        ends |= left.ends()
    for ended in [*sorted(ends), math.inf]:
        if left is not None and not left.fits_at(request, ended):
            continue
        chosen = choose(occupancy.without(ended), request, topology)
        if chosen is not None:
            return HeadStart(ended, chosen)
    return HeadStart(math.inf, None)


def earliest_start(
    request: Wants,
    gpus: Sequence[GpuSlot],
    allocations: Sequence[Claim],
    topology: Topology | None = None,
    room: HostRoom | None = None,
) -> HeadStart:
    """When and where `request` could start at the earliest, given every claim's end (and
    every hold's of the box's `room`)."""
    left = None if room is None else RoomLeft(room)
    return head_reservation(Occupancy(gpus, allocations), left, request, topology or {})


def _delays(chosen: tuple[int, ...], ends_at: float, head: HeadStart) -> bool:
    """Whether a job on `chosen` GPUs until `ends_at` could push the head's start back."""
    if head.gpus is None:
        return False
    if ends_at <= head.start < math.inf:
        return False
    return bool(set(chosen) & set(head.gpus))


def promised_gpus(head: HeadStart, ends_at: float | None) -> tuple[int, ...]:
    """The head's GPUs a job running until `ends_at` could delay it on (what `balanced`
    placement takes last): none if it ends before the head is due."""
    if head.gpus is None or (ends_at is not None and ends_at <= head.start):
        return ()
    return head.gpus


def must_wait(chosen: tuple[int, ...], ends_at: float | None, head: HeadStart) -> str | None:
    """Why a job that fits now on `chosen` may not start ahead of the head for its GPUs;
    None if it may."""
    if ends_at is None:
        return f"which starts first ({UNBOUNDED})"
    if _delays(chosen, ends_at, head):
        return f"which starts first; {DELAYS_HEAD}"
    return None
