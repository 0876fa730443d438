"""Usage reports against a year of history: `GET /v1/usage` over periods from a week to a
year, with 1,000 and with 1,000,000 finished attempts, on SQLite and on PostgreSQL, each
against the 1,000 figure (targets: the 7-day report within 2x; every request under
300 ms with 1,000,000 attempts spread evenly over the year).

Each database is a real SQLite file made by gpuq's own migrations, then filled in one
transaction: attempts (`attempt_usage`) and a job for each job's last attempt (`job`,
copied in SQL from one submitted by `bench.common.first_job`); then the rollup is made from
them (`usage.rollup.rebuild`, as the migration that brought it does). For PostgreSQL the
same rows are copied (COPY) into a fresh migrated database of a throwaway cluster
(`tests.postgres`). Two layouts:

- `recent`: the last 30 days hold the same 500 attempts at both sizes, the rest of the
  year the others: what a report costs as history grows, its period's content fixed;
- `uniform`: every attempt anywhere in the year, so the period holds 1,000 times more at
  1,000,000: what a report costs per attempt in its period.

Requests go through the real app in-process (a `TestClient` of `create_app`, the scheduler
off), timed as the median of `--repeats` (or of as many as fit in 3 s, at least 3). Usage:
    python -m bench.usage [--sizes 1000,1000000] [--layouts recent,uniform]
        [--backends sqlite,postgres] [--repeats 15]
"""

import argparse
import contextlib
import json
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from fastapi.testclient import TestClient
from sqlalchemy import create_engine

from bench.common import first_job, table
from service.api.app import create_app
from service.runtime import open_api
from service.settings import Settings
from service.team import users
from service.usage import rollup
from tests.postgres import Cluster, running_cluster

YEAR = timedelta(days=365)
MONTH = timedelta(days=30)
RECENT = 500  #: attempts in the last 30 days under the `recent` layout, at every size
OWNERS = ("ana", "ben", "chen", "dara", "eli", "fay")
OUTCOMES = ("succeeded", "failed", "cancelled", "timed_out", "preempted")
ZERO = timedelta()
BUDGET_S = 3.0  #: time to spend repeating one request at one size
GPUS = 4
SPEC = {"name": "usage", "kind": "command", "command": {"argv": ["true"]}, "resources": {"gpus": 1}}
REQUESTS = {
    "last 7 days, by owner": "/v1/usage?since=7d",
    "last 30 days, by owner": "/v1/usage?since=30d",
    "last 30 days, by day": "/v1/usage?since=30d&by=day",
    "last 30 days, by GPU": "/v1/usage?since=30d&by=gpu",
    "last 365 days, by owner": "/v1/usage?since=365d",
    "last 365 days, by day": "/v1/usage?since=365d&by=day",
    "last 365 days, by GPU": "/v1/usage?since=365d&by=gpu",
    "90 days half a year ago, by owner": "/v1/usage?since=200d&until=110d",
}
#: What the report over a year must answer within, with a million attempts (issue 52).
TARGET_MS = 300.0
#: The tables a report reads, copied to PostgreSQL.
COPIED = ("job", "attempt_usage", "usage_day", "attempt_day")
#: How SQLAlchemy stores a DateTime in SQLite (UTC, naive), so the strings compare alike.
STORED = "%Y-%m-%d %H:%M:%S.%f"
JOB_COLUMNS = [
    "name", "spec", "gpu_count", "memory_mb", "attempt", "progress", "metrics", "log_tail",
    "warnings", "depends_on", "previous_attempts", "events_offset", "priority", "held",
    "placement_violations", "preemptions", "gpu_util_samples",
]  # fmt: skip


def recent_attempts(count: int, now: datetime) -> Iterator[tuple[object, ...]]:
    """`count` ended attempts (rows of `attempt_usage`) in the month before `now`, the same
    at every size (seeded)."""
    rng = random.Random(1)
    for n in range(count):
        end = now - MONTH * rng.random()
        gpus = rng.choice((1, 1, 1, 2, 2, 4))
        held = rng.lognormvariate(7.5, 1.0)  # a median of 30 minutes
        start = end - timedelta(seconds=held)
        queued = start - timedelta(seconds=rng.expovariate(1 / 120))
        first = rng.randrange(GPUS - gpus + 1)
        outcome = rng.choices(OUTCOMES, (80, 8, 6, 2, 4))[0]
        final = outcome != "preempted"
        lost = held * gpus if outcome == "failed" else 0.3 * held * gpus if not final else 0.0
        yield (
            n + 2,  # job 1 is the template of the copied jobs
            OWNERS[n % len(OWNERS)],
            gpus,
            json.dumps(list(range(first, first + gpus))),
            queued.strftime(STORED),
            start.strftime(STORED),
            end.strftime(STORED),
            outcome,
            final,
            held * gpus,
            lost,
        )


RECENT_INSERT = """
INSERT INTO attempt_usage (job_id, attempt, owner, gpus, gpu_indices, queued_at, started_at,
    ended_at, outcome, final, gpu_seconds, lost_gpu_seconds)
VALUES (?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
#: `:count` attempts ending between `:oldest` and `:newest` (Unix times), made by SQLite
#: itself: a million rows in seconds. MATERIALIZED: each random value is drawn once.
BULK_INSERT = """
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :count),
drawn AS MATERIALIZED (
    SELECT i,
        :oldest + (:newest - :oldest) * ((abs(random()) % 1000000) / 1000000.0) AS ended,
        60 + abs(random()) % 7200 AS held,
        abs(random()) % 300 AS waited,
        abs(random()) % 100 AS pick,
        CASE abs(random()) % 6 WHEN 0 THEN 4 WHEN 1 THEN 2 WHEN 2 THEN 2 ELSE 1 END AS gpus
    FROM n
),
attempt AS (
    SELECT *, CASE WHEN pick < 80 THEN 'succeeded' WHEN pick < 88 THEN 'failed'
        WHEN pick < 94 THEN 'cancelled' WHEN pick < 96 THEN 'timed_out'
        ELSE 'preempted' END AS outcome
    FROM drawn
)
INSERT INTO attempt_usage (job_id, attempt, owner, gpus, gpu_indices, queued_at, started_at,
    ended_at, outcome, final, gpu_seconds, lost_gpu_seconds)
SELECT :first_id + i, 1, json_extract(:owners, '$[' || (i % 6) || ']'), gpus,
    CASE gpus WHEN 4 THEN '[0, 1, 2, 3]' WHEN 2 THEN '[' || (2 * (i % 2)) || ', '
        || (2 * (i % 2) + 1) || ']' ELSE '[' || (i % 4) || ']' END,
    strftime('%Y-%m-%d %H:%M:%S.000000', ended - held - waited, 'unixepoch'),
    strftime('%Y-%m-%d %H:%M:%S.000000', ended - held, 'unixepoch'),
    strftime('%Y-%m-%d %H:%M:%S.000000', ended, 'unixepoch'),
    outcome, outcome != 'preempted', held * gpus,
    CASE outcome WHEN 'failed' THEN held * gpus WHEN 'preempted' THEN 0.3 * held * gpus
        ELSE 0 END
FROM attempt ORDER BY ended
"""
#: A job for each job's last attempt, copied from job 1 (`bench.common.first_job`). Each gets
#: `rev` = its id here: the trigger that numbers revisions one row at a time is dropped for
#: this statement (and made again after it), as it would take most of the time.
JOBS_INSERT = f"""
INSERT INTO job (id, rev, owner, status, assigned_gpus, created_at, queued_at, started_at,
    finished_at, {", ".join(JOB_COLUMNS)})
SELECT u.job_id, u.job_id, u.owner, u.outcome, u.gpu_indices, u.queued_at, u.queued_at,
    u.started_at, u.ended_at, {", ".join(f"t.{c}" for c in JOB_COLUMNS)}
FROM attempt_usage u, job t WHERE t.id = 1 AND u.final ORDER BY u.job_id
"""


def populate(home: Path, count: int, layout: str, now: datetime) -> None:
    """A migrated database at `home/gpuq.db` holding `count` ended attempts over the year
    before `now`, and a job for each job's last attempt."""
    first_job(home, SPEC)
    recent = min(RECENT, count) if layout == "recent" else 0
    oldest, newest = (now - YEAR).timestamp(), (now - (MONTH if recent else ZERO)).timestamp()
    with sqlite3.connect(home / "gpuq.db") as conn:  # one transaction
        conn.executemany(RECENT_INSERT, recent_attempts(recent, now))
        bulk = {"count": count - recent, "first_id": recent + 2, "owners": json.dumps(OWNERS)}
        if bulk["count"]:
            conn.execute(BULK_INSERT, bulk | {"oldest": oldest, "newest": newest})
        (trigger,) = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'job_rev_insert'"
        ).fetchone()
        conn.execute("DROP TRIGGER job_rev_insert")
        conn.execute(JOBS_INSERT)
        conn.execute(trigger)
    engine = create_engine(f"sqlite:///{home / 'gpuq.db'}")
    with engine.begin() as connection:
        rollup.rebuild(connection)
    engine.dispose()


def copy_to_postgres(home: Path, url: str) -> None:
    """Copies the tables a report reads from `home/gpuq.db` into the migrated, empty
    PostgreSQL database at `url`, in one transaction; the job table's revision trigger is
    off meanwhile (the rows bring their own)."""
    source = sqlite3.connect(home / "gpuq.db")
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as pg:
        pg.execute("SET TIME ZONE 'UTC'")
        pg.execute("ALTER TABLE job DISABLE TRIGGER job_rev")
        for name in COPIED:
            columns = ", ".join(f'"{r[1]}"' for r in source.execute(f"PRAGMA table_info({name})"))
            with pg.cursor().copy(f"COPY {name} ({columns}) FROM STDIN") as copy:
                for row in source.execute(f"SELECT {columns} FROM {name}"):
                    copy.write_row(row)
        pg.execute("ALTER TABLE job ENABLE TRIGGER job_rev")
        for name in ("job", "attempt_usage"):
            pg.execute(
                f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), max(id)) FROM {name}"
            )
        for name in COPIED:
            pg.execute(f"ANALYZE {name}")
    source.close()


def measure(
    count: int, layout: str, repeats: int, cluster: Cluster | None
) -> dict[str, dict[str, float]]:
    """The median time in ms of each request against `count` attempts laid out so, on
    SQLite, and on PostgreSQL when a cluster is given."""
    now = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="gpuq-usage-") as tmp:
        home = Path(tmp)
        began = time.perf_counter()
        populate(home, count, layout, now)
        print(f"  {count:,} attempts ({layout}) stored in {time.perf_counter() - began:.1f} s")
        figures = {"sqlite": _requests(home, None, repeats)}
        if cluster is not None:
            with cluster.database() as url:
                began = time.perf_counter()
                copy_to_postgres(home, url)
                print(f"  copied to PostgreSQL in {time.perf_counter() - began:.1f} s")
                figures["postgres"] = _requests(home, url, repeats)
        return figures


def _requests(home: Path, url: str | None, repeats: int) -> dict[str, float]:
    """Each request's median ms against the database at `url` (None: `home`'s SQLite)."""
    settings = Settings(
        home=home,
        database_url=url,
        gpus=f"sim:{GPUS}x16GiB",
        warm_workers=0,
        allow_root_jobs=True,  # benchmarks may run as root, as on a one-user box
        allow_shared_account=True,
    )
    service = open_api(settings)
    try:
        app = create_app(settings, service)
        admin = users.add_user(service.db, "bench", admin=True)
        local = TestClient(
            app, base_url="http://127.0.0.1", headers={"Authorization": f"Bearer {admin}"}
        )
        with local as client:
            if url is None:
                print(f"  SQLite reads: {_plan(home)}")
            return {what: _median_ms(client, path, repeats) for what, path in REQUESTS.items()}
    finally:
        service.close()


def _median_ms(client: TestClient, path: str, repeats: int) -> float:
    """The median of `repeats` runs, or of as many as fit in `BUDGET_S` (at least 3)."""
    response = client.get(path)  # warm: caches, statement compilation
    assert response.status_code == 200, response.text
    times: list[float] = []
    deadline = time.perf_counter() + BUDGET_S
    while len(times) < repeats and (len(times) < 3 or time.perf_counter() < deadline):
        began = time.perf_counter()
        client.get(path)
        times.append(1000 * (time.perf_counter() - began))
    return statistics.median(times)


def _plan(home: Path) -> str:
    """How SQLite reads whole days (the rollup, by its key) and part-days (the attempts
    that touched the day, by `attempt_day`'s key)."""
    with sqlite3.connect(home / "gpuq.db") as conn:
        plans = [
            conn.execute(f"EXPLAIN QUERY PLAN {sql}", args).fetchall()
            for sql, args in (
                ("SELECT * FROM usage_day WHERE day >= ? AND day < ? AND gpu = -1",
                 ("2026-01-01", "2026-02-01")),
                ("SELECT u.* FROM attempt_usage u JOIN attempt_day d ON d.usage_id = u.id "
                 "WHERE d.day = ?", ("2026-01-01",)),
            )
        ]  # fmt: skip
    return "; ".join(str(r[-1]) for rows in plans for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,1000000")
    parser.add_argument("--layouts", default="recent,uniform")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    backends = args.backends.split(",")
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(running_cluster()) if "postgres" in backends else None
        for layout in args.layouts.split(","):
            figures = {size: measure(size, layout, args.repeats, cluster) for size in sizes}
            for backend in backends:
                _print(layout, backend, sizes, {n: f[backend] for n, f in figures.items()})


def _print(
    layout: str, backend: str, sizes: list[int], figures: dict[int, dict[str, float]]
) -> None:
    base = figures[sizes[0]]
    rows = []
    for what in REQUESTS:
        row = [what]
        for size in sizes:
            ms = figures[size][what]
            row.append(f"{ms:.1f}" if size == sizes[0] else f"{ms:.1f} ({ms / base[what]:.2f}x)")
        rows.append(row)
    print(f"\n{layout}, {backend}: median ms per request (ratio to {sizes[0]:,} attempts)")
    print(table(["request", *(f"{s:,} attempts" for s in sizes)], rows))
    slowest = max(figures[sizes[-1]].values())
    verdict = "met" if slowest < TARGET_MS else "MISSED"
    print(f"slowest at {sizes[-1]:,}: {slowest:.1f} ms (target < {TARGET_MS:.0f} ms: {verdict})\n")


if __name__ == "__main__":
    main()
