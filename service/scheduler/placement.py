"""Where queued jobs go: a pure function of the queue, the GPUs and who claims what.

Jobs are considered by priority, then by their owner's recent GPU usage (fair share: a
light user goes before a heavy one), then in submission order. The first GPU job that
cannot start is the *head*: it gets a reservation (the earliest time and GPUs it can
start on, from the running jobs' time limits), and a job behind it may start now only if,
by its own `time_limit_s`, it cannot delay that reservation (EASY backfill). A job over
its owner's `max_gpus_running`, or a sweep member past its sweep's `max_parallel`, waits
without holding anyone up. CPU-only jobs
(`gpus: 0`) need no GPU and only wait for a CPU slot.

Which GPUs a job that can start gets (best fit, the closest set in the topology) is
`gpu_choice`'s to say.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from service.scheduler.gpu_choice import Topology, choose
from service.scheduler.occupancy import Claim, GpuSlot, Occupancy


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


@dataclass(frozen=True)
class Reservation:
    """The head job's earliest start: when (inf if a running job has no time limit) and
    on which GPUs (None if it fits nowhere even on an empty box)."""

    start: float
    gpus: tuple[int, ...] | None


@dataclass
class Plan:
    placements: list[Placement] = field(default_factory=list)
    waiting: dict[int, str] = field(default_factory=dict)  #: job id → human reason
    #: the first GPU job that fits nowhere as the GPUs are now (what preemption serves)
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


def _wait_reason(occupancy: Occupancy, request: Request) -> str:
    need = "whole" if request.memory_mb is None else f"with {request.memory_mb} MiB free"
    if request.gpu_ids is not None:
        which = ", ".join(str(i) for i in request.gpu_ids)
        blocked = [
            occupancy.describe(i)
            for i in request.gpu_ids
            if not occupancy.fits(i, request.memory_mb)
        ]
        return f"waiting for GPUs {which} {need}; " + "; ".join(blocked)
    noun = "GPU" if request.gpus == 1 else "GPUs"
    state = "; ".join(occupancy.describe(i) for i in sorted(occupancy.gpus))
    return f"waiting for {request.gpus} {noun} {need}; {state}"


def _reserve(occupancy: Occupancy, request: Request, topology: Topology) -> Reservation:
    ends = sorted({h.ends_at for hs in occupancy.claims_on.values() for h in hs if h.ends_at})
    for ended in [*ends, math.inf]:
        chosen = choose(occupancy.without(ended), request, topology)
        if chosen is not None:
            return Reservation(ended, chosen)
    return Reservation(math.inf, None)


def earliest_start(
    request: Request,
    gpus: Sequence[GpuSlot],
    allocations: Sequence[Claim],
    topology: Topology | None = None,
) -> Reservation:
    """When and where `request` could start at the earliest, given every claim's end."""
    return _reserve(Occupancy(gpus, allocations), request, topology or {})


def _delays(chosen: tuple[int, ...], ends_at: float, head: Reservation) -> bool:
    """Whether a job on `chosen` GPUs until `ends_at` could push the head's start back."""
    if head.gpus is None:
        return False
    if ends_at <= head.start < math.inf:
        return False
    return bool(set(chosen) & set(head.gpus))


Shape = tuple[int, int | None, tuple[int, ...] | None]  #: GPUs, memory, GPU ids asked


class _Planning:
    """What one `plan` keeps as it goes down the queue: the GPUs, the slots and the counts
    its placements change, and the plan so far."""

    def __init__(
        self,
        gpus: Sequence[GpuSlot],
        allocations: Sequence[Claim],
        cpu_slots: int,
        running_gpus: Mapping[str, int] | None,
        sweep_running: Mapping[int, int] | None,
    ) -> None:
        self.occupancy = Occupancy(gpus, allocations)
        self.cpu_slots = cpu_slots
        #: owner → GPUs held, this plan's placements included
        self.owners = dict(running_gpus or {})
        #: sweep → members running, this plan's placements included
        self.members = dict(sweep_running or {})
        self.result = Plan()
        #: shapes that fit nowhere as the GPUs are now: a long queue asks the same few
        #: shapes again and again, and only a placement changes the answer
        self.unplaceable: set[Shape] = set()

    def start_cpu_job(self, request: Request) -> None:
        """Starts a CPU-only job if a CPU slot is left, else says it waits for one."""
        if self.cpu_slots > 0:
            self.cpu_slots -= 1
            self._count(request, Placement(request.job_id, (), None))
        else:
            self.result.waiting[request.job_id] = "waiting for a CPU job slot"

    def start(
        self, request: Request, chosen: tuple[int, ...], ends_at: float | None, backfill: bool
    ) -> None:
        """Places a GPU job on `chosen` until `ends_at`."""
        self.occupancy.take(request.job_id, chosen, request.memory_mb, ends_at)
        self.unplaceable.clear()
        self.owners[request.owner] = self.owners.get(request.owner, 0) + request.gpus
        placement = Placement(request.job_id, chosen, request.memory_mb, backfill=backfill)
        self._count(request, placement)

    def _count(self, request: Request, placement: Placement) -> None:
        if request.sweep_id is not None:
            self.members[request.sweep_id] = self.members.get(request.sweep_id, 0) + 1
        self.result.placements.append(placement)


def _sweep_full(sweep: int, running: int) -> str:
    return f"sweep {sweep} already runs {running} member(s), its max_parallel"


def _over_quota(request: Request, held: int, max_gpus_running: int) -> str:
    return (
        f"over quota: {request.owner} already runs {held} GPU(s) and may run "
        f"{max_gpus_running} (max_gpus_running)"
    )


def _must_wait(chosen: tuple[int, ...], ends_at: float | None, head: Reservation) -> str | None:
    """Why a job that fits now on `chosen` may not start ahead of the head; None if it may."""
    if ends_at is None:
        return "which starts first (a job with a time_limit_s could use idle GPUs meanwhile)"
    if _delays(chosen, ends_at, head):
        return "which starts first; this job could delay it"
    return None


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
) -> Plan:
    """Decides which queued jobs start now and on which GPUs; says why the others wait.

    `now` and the claims' `ends_at` are seconds on one clock; a job stops at most `grace_s`
    after its time limit. `usage` (owner → recent GPU-seconds) orders equal priorities;
    `running_gpus` (owner → GPUs held) counts against `max_gpus_running`, and
    `sweep_running` (sweep → members running) against `sweep_limits` (its `max_parallel`).
    """
    topology, limits = topology or {}, sweep_limits or {}
    planning = _Planning(gpus, allocations, cpu_slots, running_gpus, sweep_running)
    # The loop runs for every queued job: what it reads often is bound here, and each job
    # costs no call past `choose` until it starts or is the head.
    occupancy, owners, members = planning.occupancy, planning.owners, planning.members
    result, waiting, unplaceable = planning.result, planning.result.waiting, planning.unplaceable
    head: Request | None = None
    reserved = Reservation(math.inf, None)
    for request in order(queue, usage):
        sweep = request.sweep_id
        if sweep is not None and sweep in limits and members.get(sweep, 0) >= limits[sweep]:
            waiting[request.job_id] = _sweep_full(sweep, members[sweep])
            continue
        if request.gpus == 0:
            planning.start_cpu_job(request)
            continue
        held = owners.get(request.owner, 0)
        if max_gpus_running is not None and held + request.gpus > max_gpus_running:
            waiting[request.job_id] = _over_quota(request, held, max_gpus_running)
            continue
        shape = (request.gpus, request.memory_mb, request.gpu_ids)
        chosen = None if shape in unplaceable else choose(occupancy, request, topology)
        if chosen is None:
            unplaceable.add(shape)
        ends_at = None if request.time_limit_s is None else now + request.time_limit_s + grace_s
        if head is not None:
            why = "which starts first" if chosen is None else _must_wait(chosen, ends_at, reserved)
            if why is not None:
                waiting[request.job_id] = f"waiting behind job {head.job_id}, {why}"
                continue
        elif chosen is None:
            head = result.head = request
            reserved = _reserve(occupancy, request, topology)
            waiting[request.job_id] = _wait_reason(occupancy, request)
            continue
        assert chosen is not None
        planning.start(request, chosen, ends_at, backfill=head is not None)
    return result


@dataclass
class PlanInputs:
    """Everything `plan` reads, gathered by the scheduler in one place."""

    queue: list[Request]
    gpus: list[GpuSlot]
    allocations: list[Claim]
    cpu_slots: int = 0
    topology: Topology = field(default_factory=dict)
    now: float = 0.0
    grace_s: float = 0.0
    usage: dict[str, float] = field(default_factory=dict)
    running_gpus: dict[str, int] = field(default_factory=dict)
    max_gpus_running: int | None = None
    sweep_limits: dict[int, int] = field(default_factory=dict)
    sweep_running: dict[int, int] = field(default_factory=dict)

    def plan(self) -> Plan:
        return plan(
            self.queue,
            self.gpus,
            self.allocations,
            self.cpu_slots,
            self.topology,
            now=self.now,
            grace_s=self.grace_s,
            usage=self.usage,
            running_gpus=self.running_gpus,
            max_gpus_running=self.max_gpus_running,
            sweep_limits=self.sweep_limits,
            sweep_running=self.sweep_running,
        )
