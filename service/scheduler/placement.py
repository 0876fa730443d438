"""Where queued jobs go: a pure function of the queue, the GPUs and who claims what.

Jobs are considered by priority, then by their owner's recent GPU usage (fair share: a
light user goes before a heavy one), then in submission order. The first GPU job that
cannot start is the *head*: it gets a reservation (the earliest time and GPUs it can
start on, from the running jobs' time limits), and a job behind it may start now only if,
by its own `time_limit_s`, it cannot delay that reservation (EASY backfill). A job over
its owner's `max_gpus_running`, or a sweep member past its sweep's `max_parallel`, waits
without holding anyone up. CPU-only jobs (`gpus: 0`) need no GPU and wait for a CPU
slot.

Where the plan is given the box's room (`host_room.HostRoom`: gpuq places jobs on this
box), a job also starts only if its `cpus` and `host_memory_mb` fit in what is free; a GPU
job they do not fit is the head like one its GPUs do not, its reservation is when both
would be free, and a job behind the head (a CPU-only one included) that would run past
that start may take only the cores and memory the head leaves spare then. A CPU-only job
is never the head: it holds no one back, as before.

Which GPUs a job that can start gets is `gpu_choice`'s to say, by `GPUQ_PLACEMENT`; under
`balanced` idle GPUs are kept whole for the queued jobs `whole_gpus.kept_whole` names until
their turn, and behind the head its reserved GPUs are taken last. Each placement says why
it went where it did (`Placement.why`, `placement_reasons`).
"""

import math
from collections.abc import Mapping, Sequence

from service.scheduler.bookings import Booking, Calendar, Fence
from service.scheduler.fenced_choice import barred_why, choose_within, kept_free
from service.scheduler.gpu_choice import Policy, Topology
from service.scheduler.host_room import HostRoom, RoomLeft
from service.scheduler.occupancy import Claim, GpuSlot, Occupancy
from service.scheduler.placement_reasons import placed_because
from service.scheduler.plan_requests import Placement, Plan, Request, order
from service.scheduler.reservation import (
    HeadStart,
    head_reservation,
    must_wait,
    promised_gpus,
)
from service.scheduler.wait_reasons import (
    DELAYS_HEAD,
    gpus_wait_reason,
    over_quota,
    sweep_full,
)
from service.scheduler.whole_gpus import kept_whole

#: GPUs, memory, GPU ids asked, and the reservations' fence (`Fence.key`)
Shape = tuple[int, int | None, tuple[int, ...] | None, object]


class _Planning:
    """What one `plan` keeps as it goes down the queue: the GPUs, the box's room, the
    slots and the counts its placements change, the head, and the plan so far."""

    def __init__(
        self,
        gpus: Sequence[GpuSlot],
        allocations: Sequence[Claim],
        cpu_slots: int,
        running_gpus: Mapping[str, int] | None,
        sweep_running: Mapping[int, int] | None,
        room: HostRoom | None,
        policy: Policy,
        calendar: Calendar = Calendar(),
    ) -> None:
        self.occupancy = Occupancy(gpus, allocations)
        self.policy = policy
        #: the reservations not over, and the plan's clock
        self.calendar = calendar
        #: exclusive jobs idle GPUs are kept whole for (`kept_whole`), until their turn
        self.kept: dict[int, int] = {}
        #: the box's cores and host memory; None: not counted (Slurm places by them)
        self.room = None if room is None else RoomLeft(room)
        self.cpu_slots = cpu_slots
        #: owner → GPUs held, this plan's placements included
        self.owners = dict(running_gpus or {})
        #: sweep → members running, this plan's placements included
        self.members = dict(sweep_running or {})
        self.result = Plan()
        #: the head's earliest start, once there is a head
        self.reserved = HeadStart(math.inf, None)
        #: `waiting behind job <head>, `: the start of the reason of a job held behind it
        self.behind = ""
        #: shapes that fit nowhere as the GPUs are now: a long queue asks the same few
        #: shapes again and again, and only a placement changes the answer
        self.unplaceable: set[Shape] = set()

    def start_cpu_job(
        self, request: Request, ends_at: float | None, fenced: Fence | None = None
    ) -> None:
        """Starts a CPU-only job if a CPU slot is left and its share of the box fits
        without delaying the head, else says what it waits for."""
        waiting, left = self.result.waiting, self.room
        if self.cpu_slots <= 0:
            waiting[request.job_id] = "waiting for a CPU job slot"
            return
        held_back = kept_free(self.room, request, fenced)
        if held_back is not None:
            waiting[request.job_id] = held_back
            return
        if left is not None:
            if not left.fits(request):
                waiting[request.job_id] = "waiting for " + left.wait_reason(request)
                return
            if left.delays_head(request, ends_at):
                waiting[request.job_id] = self.behind + f"which starts first; {DELAYS_HEAD}"
                return
            left.take(request, ends_at)
        self.cpu_slots -= 1
        self._count(request, Placement(request.job_id, (), None))

    def start_gpu_job(
        self,
        request: Request,
        shape: Shape,
        ends_at: float | None,
        topology: Topology,
        fenced: Fence | None = None,
    ) -> None:
        """Starts a GPU job if its GPUs and its share of the box fit now and, behind the
        head, it cannot delay it; else says why it waits (the first that cannot start
        is the head). `fenced`: the GPUs the reservations leave it (None: every GPU)."""
        left, head = self.room, self.result.head
        held_back = fenced.waits if fenced is not None else None
        held_back = held_back or kept_free(self.room, request, fenced)
        if held_back is not None:
            self.result.waiting[request.job_id] = held_back
            return
        why = None if head is None or left is None else self._room_holds_back(request, ends_at)
        if why is not None:  # held back by the box's room: no GPU need be chosen
            self.result.waiting[request.job_id] = self.behind + why
            return
        avoid = () if head is None else promised_gpus(self.reserved, ends_at)
        keep = sum(self.kept.values())
        chosen = choose_within(self.occupancy, request, fenced, topology, self.policy, keep, avoid)
        if chosen is None:
            self.unplaceable.add(shape)
        if head is not None:
            if chosen is None:
                barred = self._barred(request, fenced, topology)
                why = barred if barred else self.behind + "which starts first"
            else:
                why = must_wait(chosen, ends_at, self.reserved)
                why = None if why is None else self.behind + why
            if why is not None:
                self.result.waiting[request.job_id] = why
                return
        elif chosen is None or (left is not None and not left.fits(request)):
            # Kept off GPUs it would fit on now by the reservations alone, it holds no one
            # back: they are barred to it for the whole of their windows.
            barred = self._barred(request, fenced, topology) if chosen is None else None
            if barred is not None:
                self.result.waiting[request.job_id] = barred
            else:
                self._block(request, chosen, topology, fenced)
            return
        assert chosen is not None
        self.start(request, chosen, ends_at, backfill=head is not None)

    def _barred(self, request: Request, fenced: Fence | None, topology: Topology) -> str | None:
        """Why `request` waits, if the reservations keep it off GPUs it would fit on now."""
        return barred_why(self.occupancy, self.calendar, request, fenced, topology)

    def _room_holds_back(self, request: Request, ends_at: float | None) -> str | None:
        """Why the box's room keeps a job behind the head: it does not fit now, or it
        could delay the head; None if neither."""
        assert self.room is not None
        if not self.room.fits(request):
            return "which starts first"
        if self.room.delays_head(request, ends_at):
            return f"which starts first; {DELAYS_HEAD}"
        return None

    def _block(
        self,
        request: Request,
        chosen: tuple[int, ...] | None,
        topology: Topology,
        fenced: Fence | None = None,
    ) -> None:
        """`request` (a GPU job that cannot start now) is the head: says what it waits
        for, and reserves its earliest start on the GPUs it may take, the box's spare
        included."""
        self.result.head = request
        self.behind = f"waiting behind job {request.job_id}, "
        occupancy, left = self.occupancy, self.room
        if fenced is not None:
            occupancy = occupancy.restricted(fenced.allowed(occupancy.gpus))
        self.reserved = reserved = head_reservation(occupancy, left, request, topology)
        if left is not None and reserved.gpus is not None:
            left.reserve(request, reserved.start)
        if chosen is None:
            why = gpus_wait_reason(occupancy, request)
            if fenced is not None and fenced.within is not None:
                why = f"in reservation {fenced.within.name}: {why}"
            if left is not None and not left.fits(request):
                why += "; and for " + left.wait_reason(request)
        else:
            assert left is not None  # its GPUs fit: only the box's room can stop it
            why = "waiting for " + left.wait_reason(request)
        self.result.waiting[request.job_id] = why

    def start(
        self, request: Request, chosen: tuple[int, ...], ends_at: float | None, backfill: bool
    ) -> None:
        """Places a GPU job on `chosen` until `ends_at`."""
        head = [] if self.result.head is None else [self.result.head.job_id]
        why = placed_because(self.occupancy, request, chosen, self.policy, [*self.kept, *head])
        self.occupancy.take(request.job_id, chosen, request.memory_mb, ends_at)
        if self.room is not None:
            self.room.take(request, ends_at)
        self.unplaceable.clear()
        self.owners[request.owner] = self.owners.get(request.owner, 0) + request.gpus
        placement = Placement(request.job_id, chosen, request.memory_mb, backfill, why)
        self._count(request, placement)

    def _count(self, request: Request, placement: Placement) -> None:
        if request.sweep_id is not None:
            self.members[request.sweep_id] = self.members.get(request.sweep_id, 0) + 1
        self.result.placements.append(placement)


def plan(
    queue: Sequence[Request],
    gpus: Sequence[GpuSlot],
    allocations: Sequence[Claim],
    cpu_slots: int = 0,
    topology: Topology | None = None,
    *,
    now: float = 0.0,
    grace_s: float = 0.0,
    usage: Mapping[str, float] | None = None,
    running_gpus: Mapping[str, int] | None = None,
    max_gpus_running: int | None = None,
    sweep_limits: Mapping[int, int] | None = None,
    sweep_running: Mapping[int, int] | None = None,
    room: HostRoom | None = None,
    placement: Policy = "balanced",
    bookings: Sequence[Booking] = (),
) -> Plan:
    """Decides which queued jobs start now and on which GPUs; says why the others wait.
    `now` and the claims' `ends_at` are seconds on one clock; a job stops at most `grace_s`
    after its time limit. `usage` (owner → recent GPU-seconds) orders equal priorities;
    `running_gpus` (owner → GPUs held) counts against `max_gpus_running`, `sweep_running`
    (sweep → members running) against `sweep_limits` (its `max_parallel`); `room`: the
    box's cores and host memory, and what runs holds of them (None: not counted);
    `placement`: which GPUs a shared job prefers (`gpu_choice`); `bookings`: reservations
    not over, which fence jobs off their GPUs (`bookings.fence`)."""
    limits, topology = sweep_limits or {}, topology or {}
    calendar = Calendar(bookings, now, grace_s)
    planning = _Planning(
        gpus, allocations, cpu_slots, running_gpus, sweep_running, room, placement, calendar
    )
    ordered = order(queue, usage)
    if placement == "balanced":
        planning.kept = kept_whole(ordered, planning.occupancy, now)
    # Run for every queued job: what it reads often is bound here.
    owners, members, kept = planning.owners, planning.members, planning.kept
    waiting, unplaceable = planning.result.waiting, planning.unplaceable
    first = ""  #: the reason of a job behind the head whose GPUs fit nowhere
    for request in ordered:
        kept.pop(request.job_id, None)  # its turn: the GPUs kept whole for it are no longer
        sweep = request.sweep_id
        if sweep is not None and sweep in limits and members.get(sweep, 0) >= limits[sweep]:
            waiting[request.job_id] = sweep_full(sweep, members[sweep])
            continue
        ends_at = None if request.time_limit_s is None else now + request.time_limit_s + grace_s
        fenced = calendar.fence(request, ends_at)
        if request.gpus == 0:
            planning.start_cpu_job(request, ends_at, fenced)
            continue
        held = owners.get(request.owner, 0)
        if max_gpus_running is not None and held + request.gpus > max_gpus_running:
            waiting[request.job_id] = over_quota(request.owner, held, max_gpus_running)
            continue
        shape = (request.gpus, request.memory_mb, request.gpu_ids, fenced and fenced.key)
        if shape in unplaceable and not (fenced and fenced.barring):
            waiting[request.job_id] = first  # only ever behind the head: the first is it
            continue
        planning.start_gpu_job(request, shape, ends_at, topology, fenced)
        first = planning.behind + "which starts first"
    return planning.result
