"""The seeded synthetic trace the scheduling benchmarks replay, and the policies that place
it: gpuq's real `plan()` (under any `GPUQ_PLACEMENT`) and first-in-first-out on whole GPUs.

The trace: jobs arrive as a Poisson process on 8 simulated 80 GiB GPUs; each asks 1 (60 %),
2 (25 %), 4 (10 %) or 8 (5 %) GPUs; 70 % give a memory cap (8, 16, 20 or 40 GiB per GPU, so
they can share), the rest want whole GPUs; run times are log-normal (median 20 min) and
each job's `time_limit_s` is its run time times 1.2-3 (users guess high). Four owners
submit in turn, so fair share has something to order.
"""

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from service.scheduler import gpu_choice
from service.scheduler.ended_usage import HORIZON_HALF_LIVES
from service.scheduler.fairshare import Interval, decayed_usage
from service.scheduler.placement import Claim, GpuSlot, Request, plan

GPUS = 8
GPU_MB = 80 * 1024
CAPS_MB = (8 * 1024, 16 * 1024, 20 * 1024, 40 * 1024)
OWNERS = ("ana", "ben", "chen", "dara")
HALF_LIFE_S = 3600.0
#: the placement policies compared (`GPUQ_PLACEMENT`); `pack` is gpuq's before issue 50
PLACEMENTS: tuple[gpu_choice.Policy, ...] = ("pack", "spread", "balanced")


@dataclass(frozen=True)
class TraceJob:
    job_id: int
    arrival: float
    gpus: int
    memory_mb: int | None  #: None: whole GPUs
    run_s: float
    limit_s: float
    owner: str

    @property
    def share(self) -> float:
        return 1.0 if self.memory_mb is None else self.memory_mb / GPU_MB

    def request(self) -> Request:
        return Request(
            self.job_id,
            0,
            self.gpus,
            memory_mb=self.memory_mb,
            owner=self.owner,
            time_limit_s=self.limit_s,
        )


def trace(count: int, load: float, seed: int = 7) -> list[TraceJob]:
    """`count` jobs whose whole-GPU demand is `load` times the 8 GPUs' capacity."""
    rng = random.Random(seed)
    shapes = []
    for _ in range(count):
        gpus = rng.choices((1, 2, 4, 8), weights=(60, 25, 10, 5))[0]
        memory = rng.choice(CAPS_MB) if rng.random() < 0.7 else None
        run_s = min(rng.lognormvariate(mu=7.1, sigma=1.0), 12 * 3600)  # median ~20 min
        shapes.append((gpus, memory, run_s))
    mean_gpu_s = statistics.fmean(g * r for g, _, r in shapes)
    gap = mean_gpu_s / (GPUS * load)  # mean time between arrivals
    jobs, clock = [], 0.0
    for job_id, (gpus, memory, run_s) in enumerate(shapes, 1):
        clock += rng.expovariate(1 / gap)
        limit = run_s * rng.uniform(1.2, 3.0)
        jobs.append(TraceJob(job_id, clock, gpus, memory, run_s, limit, OWNERS[job_id % 4]))
    return jobs


@dataclass
class Outcome:
    starts: dict[int, float] = field(default_factory=dict)
    busy_gpu_s: float = 0.0  #: seconds x GPUs with at least one job on them
    decisions: int = 0
    plan_s: float = 0.0


Running = dict[int, tuple[TraceJob, tuple[int, ...], float]]  #: job id → job, GPUs, start
Policy = Callable[[float, list[TraceJob], Running], list[tuple[TraceJob, tuple[int, ...]]]]


def gpuq_policy(
    outcome: Outcome, finished: list[Interval], placement: gpu_choice.Policy = "balanced"
) -> Policy:
    """Calls `service.scheduler.placement.plan` as the scheduler does, fair share included
    (over the jobs that ended within its horizon, as `ended_usage` reads them), under the
    `placement` policy. `finished` grows in order of end."""
    requests: dict[int, Request] = {}  #: made once a job, as the scheduler keeps its queue
    horizon_s = HORIZON_HALF_LIVES * HALF_LIFE_S
    expired = 0  #: how many of `finished` ended before the horizon

    def request(job: TraceJob) -> Request:
        made = requests.get(job.job_id)
        if made is None:
            made = requests[job.job_id] = job.request()
        return made

    def decide(
        now: float, queue: list[TraceJob], running: Running
    ) -> list[tuple[TraceJob, tuple[int, ...]]]:
        nonlocal expired
        held = [
            Claim(j.job_id, i, j.memory_mb, started + j.limit_s)
            for j, gpus, started in running.values()
            for i in gpus
        ]
        cutoff = now - horizon_s
        while expired < len(finished) and (finished[expired].end or now) <= cutoff:
            expired += 1
        live = [Interval(j.owner, j.gpus, s, None) for j, _, s in running.values()]
        usage = decayed_usage([*finished[expired:], *live], now, HALF_LIFE_S)
        slots = [GpuSlot(i, GPU_MB) for i in range(GPUS)]
        began = time.perf_counter()
        asked = list(map(request, queue))
        result = plan(asked, slots, held, now=now, usage=usage, placement=placement)
        outcome.plan_s += time.perf_counter() - began
        outcome.decisions += 1
        by_id = {j.job_id: j for j in queue}
        return [(by_id[p.job_id], p.gpu_indices) for p in result.placements]

    return decide


def fifo_whole_gpus(
    now: float, queue: list[TraceJob], running: Running
) -> list[tuple[TraceJob, tuple[int, ...]]]:
    """Strict arrival order, every job on whole GPUs, nothing overtakes the head."""
    free = sorted(set(range(GPUS)) - {i for _, gpus, _ in running.values() for i in gpus})
    started = []
    for job in queue:
        if job.gpus > len(free):
            break
        started.append((job, tuple(free[: job.gpus])))
        free = free[job.gpus :]
    return started
