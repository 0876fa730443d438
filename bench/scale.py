"""Scale: list and poll latency with 1,000, 100,000 and 1,000,000 jobs in the database,
each against the 1,000-job figure measured in the same run (target: within 2x).

Each database is made by gpuq's own migrations and one job submitted through its API
(`bench.common.first_job`), then copied in SQLite to the size wanted: 1 % queued (at least
a page of 50), 1 % failed, the rest succeeded, four owners. `gpuq serve --api-only` then
answers wrk (one connection, so the figure is latency, not contention).
Usage:
    python -m bench.scale [--sizes 1000,100000,1000000] [--seconds 3]
"""

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import first_job, gpuq_server, table, wrk

SPEC = {"name": "scale", "kind": "command", "command": {"argv": ["true"]}, "resources": {"gpus": 0}}
PAGE = 50  #: the API's default page
COPIED = [
    "name", "spec", "gpu_count", "memory_mb", "assigned_gpus", "attempt", "progress", "metrics",
    "log_tail", "warnings", "depends_on", "previous_attempts", "events_offset", "priority",
    "held", "created_at",
]  # fmt: skip


def populate(
    home: Path, jobs: int, *, spec: dict[str, Any] = SPEC, queued_every: int = 100
) -> None:
    """A migrated database at `home/gpuq.db` holding `jobs` jobs like `spec`: one in
    `queued_every` queued, one in 100 failed, the others succeeded."""
    first_job(home, spec)
    columns = ", ".join(COPIED)
    with sqlite3.connect(home / "gpuq.db") as conn:
        conn.execute(
            f"""
            WITH RECURSIVE n(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM n WHERE i < :jobs)
            INSERT INTO job (id, owner, status, finished_at, {columns})
            SELECT n.i,
                   'user' || (n.i % 4),
                   CASE WHEN n.i % :queued = 0 THEN 'queued'
                        WHEN n.i % 100 = 1 THEN 'failed' ELSE 'succeeded' END,
                   CASE WHEN n.i % :queued = 0 THEN NULL ELSE job.created_at END,
                   {", ".join(f"job.{c}" for c in COPIED)}
            FROM n, job WHERE job.id = 1
            """,
            {"jobs": jobs, "queued": queued_every},
        )


def measure(jobs: int, seconds: float) -> dict[str, float]:
    """p50 latency in ms of each request against a database of `jobs` jobs."""
    with tempfile.TemporaryDirectory(prefix="gpuq-scale-") as tmp:
        home = Path(tmp)
        began = time.perf_counter()
        # 1 % queued, but a page of them at least: every size lists the same 50 rows.
        populate(home, jobs, queued_every=max(1, min(100, jobs // PAGE)))
        made = time.perf_counter() - began
        print(f"  {jobs:,} jobs stored in {made:.1f} s", flush=True)
        requests = {
            "poll newest job": f"/v1/jobs/{jobs}",
            "poll oldest job": "/v1/jobs/1",
            "list first page (50)": "/v1/jobs",
            "list queued (50)": "/v1/jobs?status=queued",
            "list one owner's (50)": "/v1/jobs?owner=user1",
            "list one owner's, from the middle": f"/v1/jobs?owner=user1&cursor={jobs // 2}",
        }
        with gpuq_server("--api-only", home=home) as url:
            return {
                what: wrk(f"{url}{path}", connections=1, duration_s=seconds).p50_ms
                for what, path in requests.items()
            }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,100000,1000000")
    parser.add_argument("--seconds", type=float, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    figures = {size: measure(size, args.seconds) for size in sizes}
    base = figures[sizes[0]]
    rows = []
    for what in base:
        row = [what]
        for size in sizes:
            ms = figures[size][what]
            row.append(f"{ms:.2f}" if size == sizes[0] else f"{ms:.2f} ({ms / base[what]:.2f}x)")
        rows.append(row)
    print(f"p50 latency in ms, one client (ratio to {sizes[0]:,} jobs)")
    print(table(["request", *(f"{s:,} jobs" for s in sizes)], rows))


if __name__ == "__main__":
    main()
