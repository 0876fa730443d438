"""Where queued jobs go: a pure function of the queue, the GPUs and who claims what.

Jobs are considered by priority, then by their owner's recent GPU usage (fair share: a
light user goes before a heavy one), then in submission order. The first GPU job that
cannot start is the *head*: it gets a reservation (the earliest time and GPUs it can
start on, from the running jobs' time limits), and a job behind it may start now only if,
by its own `time_limit_s`, it cannot delay that reservation (EASY backfill). A job over
its owner's `max_gpus_running`, or a sweep member past its sweep's `max_parallel`, waits
without holding anyone up. CPU-only jobs
(`gpus: 0`) need no GPU and only wait for a CPU slot.

Shared jobs go best fit (the fullest GPUs that still fit). A multi-GPU job gets the set of
GPUs whose farthest pair is closest in the NVML topology (NVLink, then the same PCIe
switch, ...), since MirroredStrategy all-reduces between every pair each step.
"""

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

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


#: How many GPU sets a multi-GPU job may weigh; past this, the best-fit set is taken.
MAX_SETS = 5000
#: Topology level assumed for a pair NVML did not describe.
FAR = 1000

Topology = Mapping[tuple[int, int], int]


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


def spread(gpus: Sequence[int], topology: Topology) -> int:
    """The topology level of the farthest pair in `gpus` (0 for a single GPU)."""
    return max(
        (topology.get((min(a, b), max(a, b)), FAR) for a, b in itertools.combinations(gpus, 2)),
        default=0,
    )


def choose(occupancy: Occupancy, request: Request, topology: Topology) -> tuple[int, ...] | None:
    if request.gpu_ids is not None:
        ok = all(occupancy.fits(i, request.memory_mb) for i in request.gpu_ids)
        return tuple(request.gpu_ids) if ok else None
    candidates = [i for i in sorted(occupancy.gpus) if occupancy.fits(i, request.memory_mb)]
    if len(candidates) < request.gpus:
        return None
    if request.memory_mb is not None:
        # Best fit: the fullest GPUs that still fit, keeping emptier ones whole for big jobs.
        candidates.sort(key=lambda i: (occupancy.free_mb(i), i))
    chosen = tuple(candidates[: request.gpus])
    if request.gpus > 1 and topology and len(candidates) > request.gpus:
        # Sets come in best-fit order, so the first of the closest sets is also the best fit.
        sets = itertools.islice(itertools.combinations(candidates, request.gpus), MAX_SETS)
        chosen = min(sets, key=lambda s: spread(s, topology))
    return tuple(sorted(chosen))


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
    topology = topology or {}
    occupancy = Occupancy(gpus, allocations)
    owners = dict(running_gpus or {})
    limits = sweep_limits or {}
    members = dict(sweep_running or {})
    result = Plan()
    head: Request | None = None
    reservation = Reservation(math.inf, None)
    # Shapes that fit nowhere as the GPUs are now: a long queue asks the same few
    # shapes again and again, and only a placement changes the answer.
    unplaceable: set[tuple[int, int | None, tuple[int, ...] | None]] = set()
    for request in order(queue, usage):
        sweep = request.sweep_id
        if sweep is not None and sweep in limits and members.get(sweep, 0) >= limits[sweep]:
            result.waiting[request.job_id] = (
                f"sweep {sweep} already runs {members[sweep]} member(s), its max_parallel"
            )
            continue
        if request.gpus == 0:
            if cpu_slots > 0:
                cpu_slots -= 1
                result.placements.append(Placement(request.job_id, (), None))
                if sweep is not None:
                    members[sweep] = members.get(sweep, 0) + 1
            else:
                result.waiting[request.job_id] = "waiting for a CPU job slot"
            continue
        held = owners.get(request.owner, 0)
        if max_gpus_running is not None and held + request.gpus > max_gpus_running:
            result.waiting[request.job_id] = (
                f"over quota: {request.owner} already runs {held} GPU(s) and may run "
                f"{max_gpus_running} (max_gpus_running)"
            )
            continue
        shape = (request.gpus, request.memory_mb, request.gpu_ids)
        chosen = None if shape in unplaceable else choose(occupancy, request, topology)
        if chosen is None:
            unplaceable.add(shape)
        ends_at = None if request.time_limit_s is None else now + request.time_limit_s + grace_s
        if head is not None:
            why = None
            if chosen is None:
                why = "which starts first"
            elif ends_at is None:
                why = "which starts first (a job with a time_limit_s could use idle GPUs meanwhile)"
            elif _delays(chosen, ends_at, reservation):
                why = "which starts first; this job could delay it"
            if why is not None:
                result.waiting[request.job_id] = f"waiting behind job {head.job_id}, {why}"
                continue
        elif chosen is None:
            head = result.head = request
            reservation = _reserve(occupancy, request, topology)
            result.waiting[request.job_id] = _wait_reason(occupancy, request)
            continue
        assert chosen is not None
        occupancy.take(request.job_id, chosen, request.memory_mb, ends_at)
        unplaceable.clear()
        owners[request.owner] = held + request.gpus
        if sweep is not None:
            members[sweep] = members.get(sweep, 0) + 1
        result.placements.append(
            Placement(request.job_id, chosen, request.memory_mb, backfill=head is not None)
        )
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
