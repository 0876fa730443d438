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
from dataclasses import dataclass, field
from operator import attrgetter

from service.scheduler.gpu_choice import Policy, Topology, choose
from service.scheduler.host_room import HostRoom, RoomLeft
from service.scheduler.occupancy import Claim, GpuSlot, Occupancy
from service.scheduler.placement_reasons import placed_because
from service.scheduler.reservation import (
    Reservation,
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


@dataclass(frozen=True)
class Request:
    job_id: int
    priority: int
    gpus: int
    gpu_ids: tuple[int, ...] | None = None
    memory_mb: int | None = None  #: None: whole GPUs
    owner: str = ""
    time_limit_s: float | None = None
    sweep_id: int | None = None  #: the sweep it is a member of
    cpus: float | None = None  #: cores it holds while it runs (None: none)
    host_memory_mb: int | None = None  #: host memory it holds while it runs (None: none)
    #: its place when every owner weighs the same: priority (higher earlier), then
    #: submission, in one int (which sorts quicker than a tuple)
    rank: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rank", -self.priority * ID_SPAN + self.job_id)


@dataclass(frozen=True)
class Placement:
    job_id: int
    gpu_indices: tuple[int, ...]
    memory_mb: int | None
    backfill: bool = False  #: started ahead of a blocked head job
    why: str = ""  #: why these GPUs: "GPU 1: idle", "GPU 0: beside job 7 to keep ..."


@dataclass
class Plan:
    placements: list[Placement] = field(default_factory=list)
    waiting: dict[int, str] = field(default_factory=dict)  #: job id → human reason
    #: the first GPU job that cannot start, for its GPUs or its share of the box as they
    #: are now (what preemption serves)
    head: Request | None = None


def order(queue: Sequence[Request], usage: Mapping[str, float] | None = None) -> list[Request]:
    """Priority first (higher earlier), then the owner's recent usage, then submission.

    A long queue is sorted at every plan, so the key is one int a job: made once per job
    and read in C where usage orders no one (one owner, CPU jobs, no GPU used lately),
    else the owners' places among the distinct usages folded in."""
    usage = usage or {}
    owners = set(map(_OWNER, queue)) if usage else set()
    weights = sorted({usage.get(owner, 0.0) for owner in owners})
    if len(weights) <= 1:
        return sorted(queue, key=_RANK)
    place = {owner: weights.index(usage.get(owner, 0.0)) for owner in owners}
    width = len(weights)
    return sorted(queue, key=lambda r: (place[r.owner] - r.priority * width) * ID_SPAN + r.job_id)


#: above every job id (a dry run's `PREVIEW_ID` is 2**62)
ID_SPAN = 2**64
_OWNER = attrgetter("owner")
_RANK = attrgetter("rank")


Shape = tuple[int, int | None, tuple[int, ...] | None]  #: GPUs, memory, GPU ids asked


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
    ) -> None:
        self.occupancy = Occupancy(gpus, allocations)
        self.policy = policy
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
        self.reserved = Reservation(math.inf, None)
        #: `waiting behind job <head>, `: the start of the reason of a job held behind it
        self.behind = ""
        #: shapes that fit nowhere as the GPUs are now: a long queue asks the same few
        #: shapes again and again, and only a placement changes the answer
        self.unplaceable: set[Shape] = set()

    def start_cpu_job(self, request: Request, ends_at: float | None) -> None:
        """Starts a CPU-only job if a CPU slot is left and its share of the box fits
        without delaying the head, else says what it waits for."""
        waiting, left = self.result.waiting, self.room
        if self.cpu_slots <= 0:
            waiting[request.job_id] = "waiting for a CPU job slot"
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
        self, request: Request, shape: Shape, ends_at: float | None, topology: Topology
    ) -> None:
        """Starts a GPU job if its GPUs and its share of the box fit now and, behind the
        head, it cannot delay it; else says why it waits (the first that cannot start
        is the head)."""
        left, head = self.room, self.result.head
        why = None if head is None or left is None else self._room_holds_back(request, ends_at)
        if why is not None:  # held back by the box's room: no GPU need be chosen
            self.result.waiting[request.job_id] = self.behind + why
            return
        avoid = () if head is None else promised_gpus(self.reserved, ends_at)
        keep = sum(self.kept.values())
        chosen = choose(self.occupancy, request, topology, self.policy, keep=keep, avoid=avoid)
        if chosen is None:
            self.unplaceable.add(shape)
        if head is not None:
            why = (
                "which starts first"
                if chosen is None
                else must_wait(chosen, ends_at, self.reserved)
            )
            if why is not None:
                self.result.waiting[request.job_id] = self.behind + why
                return
        elif chosen is None or (left is not None and not left.fits(request)):
            self._block(request, chosen, topology)
            return
        assert chosen is not None
        self.start(request, chosen, ends_at, backfill=head is not None)

    def _room_holds_back(self, request: Request, ends_at: float | None) -> str | None:
        """Why the box's room keeps a job behind the head: it does not fit now, or it
        could delay the head; None if neither."""
        assert self.room is not None
        if not self.room.fits(request):
            return "which starts first"
        if self.room.delays_head(request, ends_at):
            return f"which starts first; {DELAYS_HEAD}"
        return None

    def _block(self, request: Request, chosen: tuple[int, ...] | None, topology: Topology) -> None:
        """`request` (a GPU job that cannot start now) is the head: says what it waits
        for, and reserves its earliest start, the box's spare included."""
        self.result.head = request
        self.behind = f"waiting behind job {request.job_id}, "
        occupancy, left = self.occupancy, self.room
        self.reserved = reserved = head_reservation(occupancy, left, request, topology)
        if left is not None and reserved.gpus is not None:
            left.reserve(request, reserved.start)
        if chosen is None:
            why = gpus_wait_reason(occupancy, request)
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
) -> Plan:
    """Decides which queued jobs start now and on which GPUs; says why the others wait.

    `now` and the claims' `ends_at` are seconds on one clock; a job stops at most `grace_s`
    after its time limit. `usage` (owner → recent GPU-seconds) orders equal priorities;
    `running_gpus` (owner → GPUs held) counts against `max_gpus_running`, `sweep_running`
    (sweep → members running) against `sweep_limits` (its `max_parallel`); `room`: the
    box's cores and host memory, and what runs holds of them (None: not counted);
    `placement`: which GPUs a shared job prefers (`gpu_choice`)."""
    topology, limits = topology or {}, sweep_limits or {}
    planning = _Planning(gpus, allocations, cpu_slots, running_gpus, sweep_running, room, placement)
    ordered = order(queue, usage)
    if placement == "balanced":
        planning.kept = kept_whole(ordered, planning.occupancy, now)
    # The loop runs for every queued job: what it reads often is bound here, and a job
    # whose GPUs fit nowhere (most of a long queue) costs no call at all.
    owners, members, kept = planning.owners, planning.members, planning.kept
    waiting, unplaceable = planning.result.waiting, planning.unplaceable
    first = ""  #: the reason of a job behind the head whose GPUs fit nowhere
    for request in ordered:
        if kept:  # its turn: the GPUs kept whole for it are no longer kept
            kept.pop(request.job_id, None)
        sweep = request.sweep_id
        if sweep is not None and sweep in limits and members.get(sweep, 0) >= limits[sweep]:
            waiting[request.job_id] = sweep_full(sweep, members[sweep])
            continue
        ends_at = None if request.time_limit_s is None else now + request.time_limit_s + grace_s
        if request.gpus == 0:
            planning.start_cpu_job(request, ends_at)
            continue
        held = owners.get(request.owner, 0)
        if max_gpus_running is not None and held + request.gpus > max_gpus_running:
            waiting[request.job_id] = over_quota(request.owner, held, max_gpus_running)
            continue
        shape = (request.gpus, request.memory_mb, request.gpu_ids)
        if shape in unplaceable:  # only ever behind the head: the first such job is it
            waiting[request.job_id] = first
            continue
        planning.start_gpu_job(request, shape, ends_at, topology)
        first = planning.behind + "which starts first"
    return planning.result
