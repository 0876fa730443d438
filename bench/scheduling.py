"""Scheduling quality: gpuq's real planning function driven over a synthetic trace, beside
first-in-first-out on whole GPUs and the trace's lower bound; plus planning time per
decision with 10,000 jobs queued.

The trace (seeded): jobs arrive as a Poisson process on 8 simulated 80 GiB GPUs; each asks
1 (60 %), 2 (25 %), 4 (10 %) or 8 (5 %) GPUs; 70 % give a memory cap (8, 16, 20 or
40 GiB per GPU, so they can share), the rest want whole GPUs; run times are log-normal
(median 20 min) and each job's `time_limit_s` is its run time times 1.2-3 (users guess
high). Four owners submit in turn, so fair share has something to order.

Figures, per policy: GPU-memory-time utilisation (the memory jobs asked for, times GPUs,
times run time, over 8 x 80 GiB x makespan; a whole-GPU job counts 80 GiB), GPU-busy
utilisation, mean and p95 queue wait, makespan. The lower bound on makespan is the total
GPU-time over 8 GPUs, where a shared job's GPU-time is weighted by its share of the GPU's
memory (nothing can pack tighter), or the last arrival if that is later. Usage:
    python -m bench.scheduling [--jobs 5000] [--load 1.5] [--queued 10000]
"""

import argparse
import heapq
import random
import signal
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import table
from bench.scale import COPIED, populate
from service.runtime import open_api
from service.scheduler.fairshare import Interval, decayed_usage
from service.scheduler.loop import Scheduler
from service.scheduler.placement import Claim, GpuSlot, Request, plan
from service.scheduler.steps import OnThisBox
from service.settings import Settings

GPUS = 8
GPU_MB = 80 * 1024
CAPS_MB = (8 * 1024, 16 * 1024, 20 * 1024, 40 * 1024)
OWNERS = ("ana", "ben", "chen", "dara")
HALF_LIFE_S = 3600.0


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


Policy = Callable[
    [float, list[TraceJob], dict[int, tuple[TraceJob, tuple[int, ...], float]]],
    list[tuple[TraceJob, tuple[int, ...]]],
]


def gpuq_policy(outcome: Outcome, finished: list[Interval]) -> Policy:
    """Calls `service.scheduler.placement.plan` as the scheduler does, fair share included."""

    def decide(
        now: float,
        queue: list[TraceJob],
        running: dict[int, tuple[TraceJob, tuple[int, ...], float]],
    ) -> list[tuple[TraceJob, tuple[int, ...]]]:
        held = [
            Claim(j.job_id, i, j.memory_mb, started + j.limit_s)
            for j, gpus, started in running.values()
            for i in gpus
        ]
        live = [Interval(j.owner, j.gpus, s, None) for j, _, s in running.values()]
        usage = decayed_usage([*finished, *live], now, HALF_LIFE_S)
        slots = [GpuSlot(i, GPU_MB) for i in range(GPUS)]
        began = time.perf_counter()
        result = plan([j.request() for j in queue], slots, held, now=now, usage=usage)
        outcome.plan_s += time.perf_counter() - began
        outcome.decisions += 1
        by_id = {j.job_id: j for j in queue}
        return [(by_id[p.job_id], p.gpu_indices) for p in result.placements]

    return decide


def fifo_whole_gpus(
    now: float, queue: list[TraceJob], running: dict[int, tuple[TraceJob, tuple[int, ...], float]]
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


def simulate(
    jobs: list[TraceJob], policy: Policy, outcome: Outcome, finished: list[Interval]
) -> float:
    """Runs the trace to the end under `policy`; returns the makespan."""
    events: list[tuple[float, int, int]] = [(j.arrival, 1, j.job_id) for j in jobs]
    heapq.heapify(events)
    by_id = {j.job_id: j for j in jobs}
    queue: list[TraceJob] = []
    running: dict[int, tuple[TraceJob, tuple[int, ...], float]] = {}
    now = 0.0
    while events:
        now = events[0][0]
        while events and events[0][0] == now:  # everything that happens at `now`
            _, kind, job_id = heapq.heappop(events)
            if kind == 1:
                queue.append(by_id[job_id])
            else:
                job, _, started = running.pop(job_id)
                finished.append(Interval(job.owner, job.gpus, started, now))
        for job, gpus in policy(now, queue, running):
            running[job.job_id] = (job, gpus, now)
            outcome.starts[job.job_id] = now
            heapq.heappush(events, (now + job.run_s, 0, job.job_id))
        placed = set(outcome.starts)
        queue = [j for j in queue if j.job_id not in placed]
        after = {i for _, gpus, _ in running.values() for i in gpus}
        if events:
            outcome.busy_gpu_s += len(after) * (events[0][0] - now)
    return now


def figures(jobs: list[TraceJob], outcome: Outcome, makespan: float) -> list[str]:
    waits = sorted(outcome.starts[j.job_id] - j.arrival for j in jobs)
    memory_time = sum(j.gpus * j.run_s * j.share * GPU_MB for j in jobs)
    return [
        f"{memory_time / (GPUS * GPU_MB * makespan):.1%}",
        f"{outcome.busy_gpu_s / (GPUS * makespan):.1%}",
        f"{statistics.fmean(waits) / 60:,.1f}",
        f"{waits[int(0.95 * (len(waits) - 1))] / 60:,.1f}",
        f"{makespan / 3600:,.1f}",
    ]


def planning_time(queued: int, repeats: int = 5) -> float:
    """Median seconds of one `plan` call with `queued` jobs waiting on a full box."""
    jobs = trace(queued, load=1.0, seed=11)
    held = [Claim(10**7 + i, i, None, 1e9) for i in range(GPUS)]  # every GPU held whole
    slots = [GpuSlot(i, GPU_MB) for i in range(GPUS)]
    usage = {owner: n * 1000.0 for n, owner in enumerate(OWNERS)}
    requests = [j.request() for j in jobs]
    seconds = []
    for _ in range(repeats):
        began = time.perf_counter()
        plan(requests, slots, held, now=0.0, usage=usage)
        seconds.append(time.perf_counter() - began)
    return statistics.median(seconds)


def scheduler_step_s(queued: int, repeats: int = 3, *, ended: int = 0) -> float:
    """Median seconds of the real scheduler's placement step (read the queue from SQLite,
    plan, record wait reasons) with `queued` one-GPU jobs waiting and every GPU taken, and
    `ended` one-GPU jobs that ended over the last day (fair share weighs them all)."""
    spec = {
        "name": "queued",
        "kind": "command",
        "command": {"argv": ["sleep", "30"]},
        "resources": {"gpus": 1},
    }
    with tempfile.TemporaryDirectory(prefix="gpuq-bench-") as tmp:
        home = Path(tmp)
        populate(home, queued, spec=spec, queued_every=1)
        add_ended(home, ended)
        settings = Settings(home=home, gpus="sim:8x80GiB")
        service = open_api(settings)  # the store; the scheduler is this one, never started
        scheduler = Scheduler(service.db, settings, service.registry)
        steps = scheduler.steps
        assert isinstance(steps, OnThisBox)
        try:
            steps.place()  # fills the 8 GPUs and writes every position once
            seconds = []
            for _ in range(repeats):
                # As after a submit: the queue changed, so the step plans (not the skip of
                # a step that finds nothing changed).
                steps.placer._replan.forget()
                began = time.perf_counter()
                steps.place()
                seconds.append(time.perf_counter() - began)
        finally:
            executor = scheduler.books.executor
            for job_id in list(scheduler.books.running):
                executor.signal(job_id, signal.SIGKILL)
            executor.close()
            service.close()
    return statistics.median(seconds)


def add_ended(home: Path, count: int) -> None:
    """`count` copies of job 1 that ran a minute each and ended over the last day, by four
    owners."""
    if not count:
        return
    with sqlite3.connect(home / "gpuq.db") as conn:  # as `bench.scale.populate` copies
        conn.execute(
            f"""
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :count)
            INSERT INTO job (id, owner, status, started_at, finished_at, {", ".join(COPIED)})
            SELECT (SELECT max(id) FROM job) + n.i, 'user' || (n.i % 4), 'succeeded',
                   datetime('now', '-' || (n.i % 86400) || ' seconds', '-60 seconds'),
                   datetime('now', '-' || (n.i % 86400) || ' seconds'),
                   {", ".join(f"job.{c}" for c in COPIED)}
            FROM n, job WHERE job.id = 1
            """,
            {"count": count},
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--load", type=float, default=1.5, help="whole-GPU demand / capacity")
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument(
        "--ended", type=int, default=100_000, help="GPU jobs ended in fair share's horizon"
    )
    args = parser.parse_args()
    jobs = trace(args.jobs, args.load)
    rows = []
    gpuq, gpuq_finished = Outcome(), list[Interval]()
    fifo = Outcome()
    span = simulate(jobs, gpuq_policy(gpuq, gpuq_finished), gpuq, gpuq_finished)
    rows.append(["gpuq (plan: shared GPUs, fair share, backfill)", *figures(jobs, gpuq, span)])
    span = simulate(jobs, fifo_whole_gpus, fifo, [])
    rows.append(["FIFO on whole GPUs", *figures(jobs, fifo, span)])
    bound = max(sum(j.gpus * j.run_s * j.share for j in jobs) / GPUS, jobs[-1].arrival)
    used = sum(j.gpus * j.run_s * j.share for j in jobs) / (GPUS * bound)
    rows.append(["lower bound", f"{used:.1%}", "-", "0.0", "0.0", f"{bound / 3600:,.1f}"])
    print(f"Scheduling: {args.jobs} jobs on {GPUS} x 80 GiB GPUs, whole-GPU load {args.load}")
    print(
        table(
            [
                "policy",
                "GPU-memory-time used",
                "GPU busy",
                "mean wait (min)",
                "p95 wait (min)",
                "makespan (h)",
            ],
            rows,
        )
    )
    per = planning_time(args.queued)
    mean_ms = gpuq.plan_s / max(gpuq.decisions, 1) * 1e3
    print(
        f"plan(): {per * 1e3:.1f} ms per decision with {args.queued:,} jobs queued "
        f"({1 / per:.0f} decisions/s); {mean_ms:.2f} ms on average over the "
        f"{gpuq.decisions:,} decisions of the simulation"
    )
    step = scheduler_step_s(args.queued)
    print(
        f"scheduler step (SQLite read + plan + wait reasons) with {args.queued:,} jobs "
        f"queued: {step * 1e3:.0f} ms"
    )
    # Steps of a millisecond or two: enough of them that one slow moment does not decide.
    alone, behind = scheduler_step_s(100, 15), scheduler_step_s(100, 15, ended=args.ended)
    ratio = behind / alone
    print(
        f"scheduler step with 100 jobs queued and {args.ended:,} GPU jobs ended within fair "
        f"share's horizon: {behind * 1e3:.1f} ms, {ratio:.2f}x one with none "
        f"({alone * 1e3:.1f} ms; target <= 2x: {'met' if ratio <= 2 else 'MISSED'})"
    )


if __name__ == "__main__":
    main()
