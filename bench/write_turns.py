"""Writers taking turns on one SQLite file (`service.store.write_turns`) against SQLite's
busy handler alone, in the same run.

Two processes write to one database the way gpuq's API and scheduler do: each holds its
write transaction for 0.5-3 ms (an in-transaction step), then rests 0-2 ms, over and over.
What a writer waits from asking to write to holding SQLite's write lock is timed; with
SQLite alone, a writer that finds the other's write under way sleeps 1, 2, 5, 10... ms
between tries, with turns it is woken within `STEP_S` of the other's commit. Usage:
    python -m bench.write_turns [--writes 300] [--rounds 3]
"""

import argparse
import multiprocessing
import random
import statistics
import tempfile
import time
from pathlib import Path

from sqlalchemy import text

from bench.common import table
from service.store import migrate
from service.store.db import Database
from service.store.write_turns import STEP_S

WRITERS = 2
HOLD_S = (0.0005, 0.003)
REST_S = (0.0, 0.002)


def write_often(url: str, turns: bool, writes: int, seed: int) -> list[float]:
    """One writer's waits (seconds) for `writes` write transactions."""
    db = Database.open(url)
    if not turns:
        db._turns = None  # SQLite's busy handler alone, as before turns
    rng = random.Random(seed)
    waits = []
    for n in range(writes):
        asked = time.perf_counter()
        with db.write_connection() as conn:  # BEGIN IMMEDIATE: SQLite's write lock is held
            waits.append(time.perf_counter() - asked)
            conn.execute(
                text("INSERT INTO bench_write (writer, n) VALUES (:w, :n)"), {"w": seed, "n": n}
            )
            busy_until = time.perf_counter() + rng.uniform(*HOLD_S)
            while time.perf_counter() < busy_until:
                pass
        time.sleep(rng.uniform(*REST_S))
    db.dispose()
    return waits


def measure(turns: bool, writes: int) -> tuple[list[float], float]:
    """Every wait of `WRITERS` processes writing at once, and their writes per second."""
    with tempfile.TemporaryDirectory(prefix="gpuq-bench-turns-") as folder:
        url = f"sqlite:///{Path(folder) / 'gpuq.db'}"
        db = Database.open(url)
        migrate.upgrade(db)
        with db.write_connection() as conn:
            conn.execute(text("CREATE TABLE bench_write (writer INTEGER, n INTEGER)"))
        db.dispose()
        began = time.perf_counter()
        with multiprocessing.get_context("spawn").Pool(WRITERS) as pool:
            args = [(url, turns, writes, seed) for seed in range(WRITERS)]
            waits = [w for one in pool.starmap(write_often, args) for w in one]
        return waits, WRITERS * writes / (time.perf_counter() - began)


def summary(waits: list[float]) -> tuple[float, float, float]:
    """Mean, 99th percentile and longest wait, in ms."""
    ordered = sorted(waits)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.mean(waits) * 1e3, p99 * 1e3, ordered[-1] * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.write_turns")
    parser.add_argument("--writes", type=int, default=300, help="write transactions per writer")
    parser.add_argument("--rounds", type=int, default=3, help="each way, alternately")
    args = parser.parse_args()
    results: dict[bool, list[tuple[list[float], float]]] = {True: [], False: []}
    for _ in range(args.rounds):
        for turns in (False, True):
            results[turns].append(measure(turns, args.writes))
    figures = {}
    for turns, runs in results.items():
        waits = [w for run_waits, _ in runs for w in run_waits]
        figures[turns] = (*summary(waits), statistics.median(rate for _, rate in runs))
    alone, taking = figures[False], figures[True]
    names = ("mean wait (ms)", "p99 wait (ms)", "longest wait (ms)", "writes/s (median)")
    formats = (".2f", ".2f", ".1f", ".0f")
    rows = [
        [name, f"{a:{f}}", f"{t:{f}}", f"{t / a:.2f}"]
        for name, a, t, f in zip(names, alone, taking, formats, strict=True)
    ]
    print(
        f"{WRITERS} processes writing one SQLite file, {args.writes} writes each, "
        f"{args.rounds} rounds each way (turns retried every {STEP_S * 1e3:g} ms at most)"
    )
    print(table(["what", "SQLite alone", "taking turns", "turns / alone"], rows))


if __name__ == "__main__":
    main()
