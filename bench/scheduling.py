"""Scheduling quality: gpuq's real planning function driven over a synthetic trace
(`bench.workload`), beside first-in-first-out on whole GPUs and the trace's lower bound;
the placement policies under compute contention (`bench.contention`, issue 50); plus
planning time per decision with 10,000 jobs queued.

Figures, per policy: GPU-memory-time utilisation (the memory jobs asked for, times GPUs,
times run time, over 8 x 80 GiB x makespan; a whole-GPU job counts 80 GiB), GPU-busy
utilisation, mean and p95 queue wait, makespan. The lower bound on makespan is the total
GPU-time over 8 GPUs, where a shared job's GPU-time is weighted by its share of the GPU's
memory (nothing can pack tighter), or the last arrival if that is later. Usage:
    python -m bench.scheduling [--jobs 5000] [--load 1.5] [--queued 10000]
        [--mixed-load 0.6] [--contention-only]
"""

import argparse
import heapq
import signal
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from bench import contention
from bench.common import table
from bench.scale import COPIED, populate
from bench.workload import (
    GPU_MB,
    GPUS,
    OWNERS,
    PLACEMENTS,
    Outcome,
    Policy,
    Running,
    TraceJob,
    fifo_whole_gpus,
    gpuq_policy,
    trace,
)
from service.runtime import open_api
from service.scheduler import gpu_choice
from service.scheduler.bookings import Booking
from service.scheduler.fairshare import Interval
from service.scheduler.loop import Scheduler
from service.scheduler.placement import Claim, GpuSlot, plan
from service.scheduler.steps import OnThisBox
from service.settings import Settings


def simulate(
    jobs: list[TraceJob], policy: Policy, outcome: Outcome, finished: list[Interval]
) -> float:
    """Runs the trace to the end under `policy`; returns the makespan."""
    events: list[tuple[float, int, int]] = [(j.arrival, 1, j.job_id) for j in jobs]
    heapq.heapify(events)
    by_id = {j.job_id: j for j in jobs}
    queue: list[TraceJob] = []
    running: Running = {}
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


def planning_time(
    queued: int,
    repeats: int = 5,
    *,
    placement: gpu_choice.Policy = "balanced",
    bookings: tuple[Booking, ...] = (),
) -> float:
    """Median seconds of one `plan` call with `queued` jobs waiting on a full box, under
    the `placement` policy, with `bookings` (reservations) to weigh."""
    jobs = trace(queued, load=1.0, seed=11)
    held = [Claim(10**7 + i, i, None, 1e9) for i in range(GPUS)]  # every GPU held whole
    slots = [GpuSlot(i, GPU_MB) for i in range(GPUS)]
    usage = {owner: n * 1000.0 for n, owner in enumerate(OWNERS)}
    requests = [j.request() for j in jobs]
    seconds = []
    for _ in range(repeats):
        began = time.perf_counter()
        plan(requests, slots, held, now=0.0, usage=usage, placement=placement, bookings=bookings)
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
        # As root, gpuq refuses command jobs unless told otherwise: the GPUs would stay
        # free and every step would place (and rewrite the queue) again.
        settings = Settings(home=home, gpus="sim:8x80GiB", allow_root_jobs=True)
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


def planning_times(queued: int, rounds: int = 3) -> dict[str, float]:
    """`planning_time` under each placement policy, the policies taking turns round by
    round (this machine's noise then falls on each alike); the median of the rounds."""
    seconds: dict[str, list[float]] = {p: [] for p in PLACEMENTS}
    for _ in range(rounds):
        for placement in PLACEMENTS:
            seconds[placement].append(planning_time(queued, placement=placement))
    return {p: statistics.median(s) for p, s in seconds.items()}


#: two reservations: GPUs 0-3 open now for two owners, GPU 7 in an hour for a third
BOOKINGS = (
    Booking("paper", frozenset(range(4)), -60.0, 8 * 3600.0, frozenset(OWNERS[:2]), "paper"),
    Booking("demo", frozenset({7}), 3600.0, 7200.0, frozenset(OWNERS[2:3]), "demo"),
)


def booked_planning_times(queued: int, rounds: int = 3) -> tuple[float, float]:
    """`planning_time` without reservations and with `BOOKINGS`, taking turns; medians."""
    without, booked = [], []
    for _ in range(rounds):
        without.append(planning_time(queued))
        booked.append(planning_time(queued, bookings=BOOKINGS))
    return statistics.median(without), statistics.median(booked)


def quality(jobs: list[TraceJob], load: float) -> Outcome:
    """Prints the trace's table (run times fixed, as alone) for gpuq's plan under balanced
    and pack, FIFO and the lower bound; returns the balanced run's outcome."""
    rows, outcomes = [], {}
    for placement in ("balanced", "pack"):
        outcome, finished = Outcome(), list[Interval]()
        span = simulate(jobs, gpuq_policy(outcome, finished, placement), outcome, finished)
        name = f"gpuq, {placement} (plan: shared GPUs, fair share, backfill)"
        rows.append([name, *figures(jobs, outcome, span)])
        outcomes[placement] = outcome
    fifo = Outcome()
    span = simulate(jobs, fifo_whole_gpus, fifo, [])
    rows.append(["FIFO on whole GPUs", *figures(jobs, fifo, span)])
    bound = max(sum(j.gpus * j.run_s * j.share for j in jobs) / GPUS, jobs[-1].arrival)
    used = sum(j.gpus * j.run_s * j.share for j in jobs) / (GPUS * bound)
    rows.append(["lower bound", f"{used:.1%}", "-", "0.0", "0.0", f"{bound / 3600:,.1f}"])
    print(f"Scheduling: {len(jobs)} jobs on {GPUS} x 80 GiB GPUs, whole-GPU load {load}")
    headers = ["policy", "GPU-memory-time used", "GPU busy", "mean wait (min)"]
    print(table([*headers, "p95 wait (min)", "makespan (h)"], rows))
    return outcomes["balanced"]


def contended(mixed: list[TraceJob], mixed_load: float, high: list[TraceJob], load: float) -> None:
    """Prints the placement policies under compute contention: the mixed trace, where idle
    GPUs are common, and the high-load one, where they are not."""
    print("\nUnder compute contention (k jobs on one GPU run at 1/k speed each, no limits)")
    contention.report(mixed, f"mixed trace: {len(mixed)} jobs, whole-GPU load {mixed_load}")
    print()
    contention.report(high, f"high load: {len(high)} jobs, whole-GPU load {load}")


def timings(queued: int, ended: int, simulated: Outcome) -> None:
    """Prints plan()'s time per decision under each policy and the scheduler step's."""
    per = planning_times(queued)
    mean_ms = simulated.plan_s / max(simulated.decisions, 1) * 1e3
    balanced, pack = per["balanced"], per["pack"]
    print(
        f"\nplan(): {balanced * 1e3:.1f} ms per decision with {queued:,} jobs queued "
        f"({1 / balanced:.0f} decisions/s); {mean_ms:.2f} ms on average over the "
        f"{simulated.decisions:,} decisions of the simulation (balanced)"
    )
    ratio = balanced / pack
    print(
        "plan() with {:,} queued on a full box, median of 3 interleaved rounds: {}; "
        "balanced / pack {:.2f}x (target <= 1.2x: {})".format(
            queued,
            ", ".join(f"{p} {s * 1e3:.2f} ms" for p, s in per.items()),
            ratio,
            "met" if ratio <= 1.2 else "MISSED",
        )
    )
    without, booked = booked_planning_times(queued)
    print(
        f"plan() with {queued:,} queued and two reservations: {booked * 1e3:.2f} ms, "
        f"{booked / without:.2f}x without ({without * 1e3:.2f} ms)"
    )
    step = scheduler_step_s(queued)
    print(
        f"scheduler step (SQLite read + plan + wait reasons) with {queued:,} jobs "
        f"queued: {step * 1e3:.0f} ms"
    )
    # Steps of a millisecond or two: enough of them that one slow moment does not decide.
    alone, behind = scheduler_step_s(100, 15), scheduler_step_s(100, 15, ended=ended)
    ratio = behind / alone
    print(
        f"scheduler step with 100 jobs queued and {ended:,} GPU jobs ended within fair "
        f"share's horizon: {behind * 1e3:.1f} ms, {ratio:.2f}x one with none "
        f"({alone * 1e3:.1f} ms; target <= 2x: {'met' if ratio <= 2 else 'MISSED'})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--load", type=float, default=1.5, help="whole-GPU demand / capacity")
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument(
        "--ended", type=int, default=100_000, help="GPU jobs ended in fair share's horizon"
    )
    parser.add_argument(
        "--mixed-load", type=float, default=0.6, help="the contention comparison's trace"
    )
    parser.add_argument(
        "--contention-only", action="store_true", help="only the contention comparison"
    )
    args = parser.parse_args()
    jobs, mixed = trace(args.jobs, args.load), trace(args.jobs, args.mixed_load)
    if args.contention_only:
        contended(mixed, args.mixed_load, jobs, args.load)
        return
    simulated = quality(jobs, args.load)
    contended(mixed, args.mixed_load, jobs, args.load)
    timings(args.queued, args.ended, simulated)


if __name__ == "__main__":
    main()
