"""Which running jobs a waiting job may preempt, and which it would: a pure function beside
placement (`placement.plan` says which queued job is blocked first, its *head*).

Under `GPUQ_PREEMPT=priority` the head may stop running jobs of lower priority that are
preemptible (keras jobs by default, command jobs whose spec says so), have run at least
`GPUQ_PREEMPT_MIN_RUN_S`, were preempted fewer than `GPUQ_PREEMPT_MAX_TIMES` times and are
not already stopping. Of the sets of such jobs whose GPUs would let the head start, the
one taken costs least, compared in this order:

1. the highest priority in the set, lowest first (the least urgent work goes first);
2. the GPU-seconds the set loses: each job's GPUs times the seconds since its last checkpoint (the
   last epoch it reported, or its start), fewest first;
3. the number of jobs, fewest first.

Where the box's cores and host memory are counted (`host_room`), the set must also free
enough of them for the head: a set whose GPUs would do but whose cores would not is not
taken. Only jobs on GPUs are candidates, as before: a CPU-only job is never preempted.

Only the `MAX_CANDIDATES` cheapest candidates by (priority, GPU-seconds lost) are weighed,
every subset of them, so the choice is exact on any box gpuq runs on and bounded on a
bigger one.
"""

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from service.scheduler.gpu_choice import Topology, choose
from service.scheduler.host_room import HostRoom, fits_in
from service.scheduler.occupancy import Claim, GpuSlot, Occupancy
from service.scheduler.placement import Request

#: How many candidates are weighed at most (2^10 subsets).
MAX_CANDIDATES = 10


@dataclass(frozen=True)
class Candidate:
    """A running job as preemption sees it."""

    job_id: int
    owner: str
    priority: int
    gpus: int
    lost_s: float  #: seconds of its work since its last checkpoint
    cpus: float | None = None  #: the cores it holds, given back when it stops
    host_memory_mb: int | None = None  #: the host memory it holds, likewise

    @property
    def lost_gpu_s(self) -> float:
        return self.gpus * self.lost_s

    def describe(self) -> str:
        return (
            f"job {self.job_id} ({self.owner}, priority {self.priority}, "
            f"loses ~{round(self.lost_s):d} s)"
        )


@dataclass(frozen=True)
class Rules:
    """The site's preemption settings."""

    min_run_s: float
    max_times: int


def eligible(
    rules: Rules, *, preemptible: bool, ran_s: float, preemptions: int, stopping: bool
) -> bool:
    """Whether a running job may be preempted at all (whoever waits)."""
    return (
        preemptible and not stopping and ran_s >= rules.min_run_s and preemptions < rules.max_times
    )


def _cost(victims: Sequence[Candidate]) -> tuple[int, float, int]:
    return (max(v.priority for v in victims), sum(v.lost_gpu_s for v in victims), len(victims))


def victims(
    request: Request,
    gpus: Sequence[GpuSlot],
    allocations: Sequence[Claim],
    candidates: Sequence[Candidate],
    topology: Topology | None = None,
    room: HostRoom | None = None,
) -> tuple[Candidate, ...]:
    """The cheapest set of `candidates` (eligible running jobs) whose GPUs, and cores and
    host memory of the box's `room` (None: not counted), once theirs are given back, let
    `request` start; empty if it would start without them (draining GPUs counted free) or
    cannot start even with all of them. Only jobs of lower priority than `request` are
    taken."""
    if request.gpus == 0:
        return ()
    # A GPU that drains after a job's end (a victim's, say) is free in seconds: no one is
    # preempted for what it will give.
    soon = [replace(g, unavailable=None) if g.draining else g for g in gpus]
    occupancy = Occupancy(soon, allocations)
    topology = topology or {}
    free_cpus, free_mb = room.free() if room is not None else (math.inf, math.inf)
    if fits_in(request, free_cpus, free_mb) and choose(occupancy, request, topology) is not None:
        return ()
    lower = sorted(
        (c for c in candidates if c.priority < request.priority and c.gpus > 0),
        key=lambda c: (c.priority, c.lost_gpu_s, c.job_id),
    )[:MAX_CANDIDATES]
    best: tuple[Candidate, ...] = ()
    for size in range(1, len(lower) + 1):
        for subset in itertools.combinations(lower, size):
            if best and _cost(subset) >= _cost(best):
                continue
            cpus = free_cpus + sum(c.cpus or 0.0 for c in subset)
            if not fits_in(request, cpus, free_mb + sum(c.host_memory_mb or 0 for c in subset)):
                continue
            freed = occupancy.without_jobs({c.job_id for c in subset})
            if choose(freed, request, topology) is not None:
                best = subset
    return tuple(sorted(best, key=lambda c: c.job_id))
