"""What one durable accept costs, layer by layer, beside task-spooler (issue 31).

Four clients submit a trivial command job for `--seconds`, `--rounds` times over, to each
of these in turn (so each sees the same hours of this machine):

- task-spooler: 4 loops of `tsp true`, as `bench.vs_tsp` measures it;
- a bare FastAPI route served as gpuq is (`bench.bare_app`) that validates the body as
  gpuq's `JobSpec` and answers, storing nothing;
- the same route storing each job durably: one SQLite insert (WAL, `synchronous=FULL`)
  committed before the 201, as gpuq's is;
- `gpuq serve --api-only` (the submit path alone) and `gpuq serve` (with the scheduler
  running what it accepts, as tsp does).

Then, in this process, one submission's parts one at a time (median µs of `--calls`): the
body's validation, the checks at submit (`SubmitChecks.check`), `Jobs.submit` alone (the
checks, the group commit, its statements and commit) and a bare durable SQLite insert.
The rows of wrk against the bare routes are the floor of a Python route with a durable
write; gpuq's rows against them show what gpuq's own path adds.

Usage:
    python -m bench.accept_path [--seconds 3] [--rounds 2] [--calls 300]
"""

import argparse
import json
import shutil
import statistics
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

from bench import bare_app
from bench.common import bare_server, gpuq_server, table, wrk_post
from bench.vs_tsp import CLIENTS, SPEC, timed, tsp_accept_rate, tsp_queue
from gpuq.contract.spec import JobSpec


def post_rate(url: str, seconds: float) -> float:
    """Jobs answered 2xx per second by `CLIENTS` connections POSTing `SPEC` to `url`."""
    load = wrk_post(url, SPEC, connections=CLIENTS, duration_s=seconds)
    return load.requests_per_s - load.errors / seconds


def gpuq_rate(seconds: float, *args: str) -> float:
    with gpuq_server(*args, GPUQ_WARM_WORKERS="0", GPUQ_MAX_CPU_JOBS="2") as url:
        return post_rate(f"{url}/v1/jobs", seconds)


def tsp_rate(seconds: float) -> float:
    with tsp_queue() as env:
        return tsp_accept_rate(env, seconds)


def bare_rates(seconds: float) -> tuple[float, float]:
    with bare_server() as url:
        return post_rate(f"{url}/validated", seconds), post_rate(f"{url}/stored", seconds)


def rates(seconds: float, rounds: int) -> dict[str, list[float]]:
    """Each way's accept rate, once a round, the ways in turn."""
    found: dict[str, list[float]] = {}
    for _ in range(rounds):
        found.setdefault("tsp", []).append(tsp_rate(seconds))
        validated, stored = bare_rates(seconds)
        found.setdefault("validated", []).append(validated)
        found.setdefault("stored", []).append(stored)
        found.setdefault("api-only", []).append(gpuq_rate(seconds, "--api-only"))
        found.setdefault("serve", []).append(gpuq_rate(seconds))
    return found


WAYS = {
    "tsp": "task-spooler, 4 loops of `tsp true`",
    "validated": "bare FastAPI route: JobSpec validated, nothing stored",
    "stored": "the same, one durable SQLite insert a request",
    "api-only": "gpuq serve --api-only",
    "serve": "gpuq serve (its scheduler runs the jobs)",
}


def median_us(call: Callable[[], object], calls: int) -> float:
    timed(call, calls // 10)  # warm
    return statistics.median(timed(call, calls)) * 1e6


def parts_us(calls: int) -> list[tuple[str, float]]:
    """One submission's parts, in this process, one at a time."""
    from service.runtime import open_api
    from service.settings import Settings
    from service.team.users import OPEN

    body = json.dumps(SPEC).encode()
    spec = JobSpec.model_validate_json(body)
    with tempfile.TemporaryDirectory(prefix="gpuq-bench-accept-") as scratch:
        home = Path(scratch) / "gpuq"
        settings = Settings(
            home=home,
            gpus="sim:2x16GiB",
            warm_workers=0,
            allow_root_jobs=True,  # as `gpuq_server`: benchmarks may run as root
            allow_shared_account=True,
        )
        service = open_api(settings)
        try:
            found = [
                (
                    "the body validated (`JobSpec.model_validate_json`)",
                    lambda: JobSpec.model_validate_json(body),
                ),
                (
                    "the checks at submit (`SubmitChecks.check`)",
                    lambda: service.jobs.checks.check(spec, OPEN),
                ),
                ("`Jobs.submit`, alone (durable)", lambda: service.jobs.submit(spec, OPEN)),
            ]
            measured = [(what, median_us(call, calls)) for what, call in found]
        finally:
            service.close()
        bare = bare_app.open_jobs(f"{scratch}/bare.db")
        insert = partial(bare_app.store, bare, spec)
        measured.append(
            ("a bare durable SQLite insert (`bench.bare_app.store`)", median_us(insert, calls))
        )
        bare.close()
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3, help="how long clients submit")
    parser.add_argument("--rounds", type=int, default=2, help="times each way is measured")
    parser.add_argument("--calls", type=int, default=300, help="calls timed per part")
    args = parser.parse_args()
    if shutil.which("tsp") is None or shutil.which("wrk") is None:
        raise SystemExit("tsp or wrk is missing: `make bench` installs both")
    found = rates(args.seconds, args.rounds)
    tsp = statistics.median(found["tsp"])
    stored = statistics.median(found["stored"])
    rows = []
    for way, what in WAYS.items():
        rate = statistics.median(found[way])
        each = ", ".join(f"{r:.0f}" for r in found[way])
        rows.append([what, f"{rate:.0f}", each, f"{rate / tsp:.2f}", f"{rate / stored:.2f}"])
    headers = [f"accepted/s, {CLIENTS} clients", "median", "each round", "/ tsp", "/ stored"]
    print(table(headers, rows))
    print()
    print(
        table(
            ["one submission's part, alone", "median µs"],
            [[what, f"{us:.0f}"] for what, us in parts_us(args.calls)],
        )
    )


if __name__ == "__main__":
    main()
