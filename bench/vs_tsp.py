"""A trivial job (`["true"]`, `gpus: 0`) through gpuq and through task-spooler (`tsp`),
side by side in one run, each ratio beside its target (issue 31; every gpuq job is on
disk, `synchronous=FULL`, before its 201):

- submit → finished as a client sees it, polling every 10 ms (gpuq `GET /v1/jobs/{id}`,
  `tsp -s ID`) and blocking (gpuq's long poll `wait_s`, `tsp -w ID`);
- `--jobs` such jobs through 2 slots (`GPUQ_MAX_CPU_JOBS=2`, `tsp -S 2`), submitted then
  waited for;
- the accept rate of 4 concurrent clients for `--seconds`: wrk POSTing over 4 connections
  to a full `gpuq serve` (which runs what it accepts, as tsp does) against 4 loops of
  `tsp true`. gpuq answers only once the job is on disk; tsp keeps its queue in memory.
  A last row, for information, has gpuq `--api-only` accept the same way: the submit path
  without a scheduler beside it;
- two floors, beside the rows they explain: the polled figure of a bare FastAPI app served as
  gpuq is (`bench.bare_app`: `POST /stored` validates the spec and stores it durably, one
  poll interval, `GET /const`), which no FastAPI service can beat; and gpuq `--api-only`
  taking the `--jobs` submissions one after another with nothing run, which the drain
  can never beat;
- polls of one finished job by one client for `--seconds`: gpuq `GET /v1/jobs/{id}` by wrk
  over one kept-alive connection (as a program or the Python client polls), `tsp -s ID` in
  a shell loop (tsp's client is a small C program: a process per poll costs it ~1 ms, where
  a `curl` process alone takes ~8 ms here, so a shell loop of curl measures curl).

Usage:
    python -m bench.vs_tsp [--runs 10] [--jobs 200] [--seconds 3]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx

from bench.common import bare_server, gpuq_server, table, wait_ended, wrk, wrk_post
from gpuq.contract.states import TERMINAL

TRUE = shutil.which("true") or "/bin/true"
SPEC = {"name": "true", "kind": "command", "command": {"argv": [TRUE]}, "resources": {"gpus": 0}}
POLL_S = 0.010
CLIENTS = 4
#: One client: `$2...` (`tsp true`, `tsp -s ID`, `curl URL`) in a loop until the deadline
#: (`$1`, microseconds from now); prints how many times it ran.
LOOP = """
end=$(( ${EPOCHREALTIME/./} + $1 )); shift; n=0
while (( ${EPOCHREALTIME/./} < end )); do "$@" >/dev/null || exit 1; n=$((n + 1)); done
echo $n
"""


@dataclass
class Figures:
    polled_s: list[float]
    blocking_s: list[float]
    drain_s: float
    accepted_per_s: float
    refused: int = 0  #: answers other than 2xx while accepting
    polls_per_s: float = 0.0  #: one client asking about one finished job
    accepted_api_only_per_s: float = 0.0  #: gpuq `--api-only`; tsp has no such mode
    refused_api_only: int = 0
    bare_polled_s: list[float] = field(default_factory=list)  #: the polled floor (`bare_polled`)
    submitted_s: float = 0.0  #: the drain's `--jobs` submissions alone, `--api-only`


def timed(action: Callable[[], object], runs: int) -> list[float]:
    seconds = []
    for _ in range(runs):
        began = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - began)
    return seconds


# --- gpuq ----------------------------------------------------------------------------------


def gpuq_polled(client: httpx.Client) -> None:
    job = client.post("/v1/jobs", json=SPEC).json()
    while job["status"] not in TERMINAL:
        time.sleep(POLL_S)
        job = client.get(f"/v1/jobs/{job['id']}").json()
    assert job["status"] == "succeeded", job


def gpuq_blocking(client: httpx.Client) -> None:
    job = wait_ended(client, client.post("/v1/jobs", json=SPEC).json())
    assert job["status"] == "succeeded", job


def gpuq_drain(client: httpx.Client, count: int) -> None:
    ids = [client.post("/v1/jobs", json=SPEC).json()["id"] for _ in range(count)]
    for job_id in ids:
        wait_ended(client, client.get(f"/v1/jobs/{job_id}").json())


def bare_polled(client: httpx.Client) -> None:
    """The polled figure's floor: a spec validated and stored durably by a bare FastAPI
    route, one poll interval, one poll of a constant."""
    client.post("/stored", json=SPEC).raise_for_status()
    time.sleep(POLL_S)
    client.get("/const").raise_for_status()


def gpuq_submit(client: httpx.Client, count: int) -> None:
    for _ in range(count):
        client.post("/v1/jobs", json=SPEC).raise_for_status()


def measure_gpuq(runs: int, jobs: int, seconds: float) -> Figures:
    # Warm workers are for Keras jobs; one importing TensorFlow meanwhile would only add noise.
    with (
        gpuq_server(GPUQ_MAX_CPU_JOBS="2", GPUQ_WARM_WORKERS="0") as url,
        httpx.Client(base_url=url, timeout=60) as client,
    ):
        gpuq_blocking(client)  # warm: the first launch imports more
        polled = timed(lambda: gpuq_polled(client), runs)
        blocking = timed(lambda: gpuq_blocking(client), runs)
        drain = timed(lambda: gpuq_drain(client, jobs), 1)[0]
        job_id = client.get("/v1/jobs", params={"limit": 1}).json()["jobs"][0]["id"]
        polls = wrk(f"{url}/v1/jobs/{job_id}", connections=1, duration_s=seconds)
        accepted, refused = gpuq_accept_rate(url, seconds)
    with (
        gpuq_server("--api-only", GPUQ_WARM_WORKERS="0") as url,
        httpx.Client(base_url=url, timeout=60) as client,
    ):
        gpuq_submit(client, 1)  # warm
        submitted = timed(lambda: gpuq_submit(client, jobs), 1)[0]
        api_only, refused_api_only = gpuq_accept_rate(url, seconds)
    with bare_server() as url, httpx.Client(base_url=url, timeout=60) as client:
        bare_polled(client)  # warm
        bare = timed(lambda: bare_polled(client), runs)
    return Figures(
        polled,
        blocking,
        drain,
        accepted,
        refused,
        polls.requests_per_s - polls.errors / seconds,
        api_only,
        refused_api_only,
        bare,
        submitted,
    )


def polls_per_s(seconds: float, *argv: str, env: dict[str, str] | None = None) -> float:
    """How many times per second one shell loop runs `argv` (`LOOP`)."""
    loop = ["bash", "-c", LOOP, "polls", str(round(seconds * 1e6)), *argv]
    environ = {**(env or os.environ), "LC_ALL": "C"}
    return int(subprocess.run(loop, env=environ, capture_output=True, text=True).stdout) / seconds


def gpuq_accept_rate(url: str, seconds: float) -> tuple[float, int]:
    """Jobs accepted per second by `CLIENTS` concurrent connections, and how many refused."""
    load = wrk_post(f"{url}/v1/jobs", SPEC, connections=CLIENTS, duration_s=seconds)
    return load.requests_per_s - load.errors / seconds, load.errors


# --- task-spooler --------------------------------------------------------------------------


def tsp(env: dict[str, str], *args: str) -> str:
    return subprocess.run(["tsp", *args], env=env, capture_output=True, text=True).stdout


def tsp_polled(env: dict[str, str]) -> None:
    job_id = tsp(env, TRUE).strip()
    while True:
        time.sleep(POLL_S)
        if tsp(env, "-s", job_id).strip() == "finished":
            return


def tsp_blocking(env: dict[str, str]) -> None:
    tsp(env, "-w", tsp(env, TRUE).strip())


def tsp_drain(env: dict[str, str], count: int) -> None:
    ids = [tsp(env, TRUE).strip() for _ in range(count)]
    for job_id in ids:
        tsp(env, "-w", job_id)


def tsp_accept_rate(env: dict[str, str], seconds: float) -> float:
    """Jobs queued per second by `CLIENTS` concurrent loops of `tsp true`."""
    argv = ["bash", "-c", LOOP, "loop", str(round(seconds * 1e6)), "tsp", TRUE]
    loops = [
        subprocess.Popen(argv, env={**env, "LC_ALL": "C"}, stdout=subprocess.PIPE, text=True)
        for _ in range(CLIENTS)
    ]
    counts = [int(loop.communicate()[0]) for loop in loops]
    return sum(counts) / seconds


@contextmanager
def tsp_queue() -> Iterator[dict[str, str]]:
    """A task-spooler queue of its own with 2 slots, killed after the block; yields the
    environment its `tsp` commands need."""
    # Jobs killed with the queue may still be writing their output as the folder goes.
    with tempfile.TemporaryDirectory(prefix="gpuq-bench-tsp-", ignore_cleanup_errors=True) as tmp:
        # TMPDIR: where tsp keeps each job's output, gone with the folder.
        env = {**os.environ, "TS_SOCKET": f"{tmp}/socket", "TS_SAVELIST": f"{tmp}/list"}
        env["TMPDIR"] = tmp
        tsp(env, "-S", "2")
        try:
            yield env
        finally:
            tsp(env, "-K")


def measure_tsp(runs: int, jobs: int, seconds: float) -> Figures:
    with tsp_queue() as env:
        polled = timed(lambda: tsp_polled(env), runs)
        blocking = timed(lambda: tsp_blocking(env), runs)
        drain = timed(lambda: tsp_drain(env, jobs), 1)[0]
        job_id = tsp(env, TRUE).strip()
        tsp(env, "-w", job_id)
        polls = polls_per_s(seconds, "tsp", "-s", job_id, env=env)
        accepted = tsp_accept_rate(env, seconds)
    return Figures(polled, blocking, drain, accepted, polls_per_s=polls)


# --- the report ----------------------------------------------------------------------------


#: Each ratio's target (issue 31): at most (≤) or at least (≥) this many times tsp's figure.
TARGETS = {
    "polled": ("≤", 1.0),
    "blocking": ("≤", 1.5),  # issue 16's; issue 31 keeps it for information
    "drain": ("≤", 2.0),
    "accept": ("≥", 1.0),
    "poll": ("≥", 1.0),
}


def row(what: str, target: str, gpuq: float, tsp: float, fmt: str) -> list[str]:
    sign, bound = TARGETS[target]
    ratio = gpuq / tsp
    met = ratio <= bound if sign == "≤" else ratio >= bound
    cells = [format(gpuq, fmt), format(tsp, fmt), f"{ratio:.2f}", f"{sign}{bound:g}x"]
    return [what, *cells, "yes" if met else "NO"]


def beside(what: str, figure: float, baseline: float, fmt: str) -> list[str]:
    """A row for information, with no target: a figure that explains the row above it."""
    cells = [format(figure, fmt), format(baseline, fmt), f"{figure / baseline:.2f}"]
    return [what, *cells, "-", ""]


def rows(gpuq: Figures, tsp: Figures, jobs: int, seconds: float) -> list[list[str]]:
    def ms(values: list[float]) -> float:
        return statistics.median(values) * 1e3

    polled = f"submit → finished, polled every {POLL_S * 1e3:g} ms (median ms)"
    accepted = f"accepted/s, {CLIENTS} clients for {seconds:g} s"
    if gpuq.refused:
        accepted += f" ({gpuq.refused} refused by gpuq)"

    return [
        row(polled, "polled", ms(gpuq.polled_s), ms(tsp.polled_s), ".1f"),
        beside(
            "  floor: bare FastAPI, durable POST + one poll",
            ms(gpuq.bare_polled_s),
            ms(tsp.polled_s),
            ".1f",
        ),
        row(
            "submit → finished, blocking wait (median ms)",
            "blocking",
            ms(gpuq.blocking_s),
            ms(tsp.blocking_s),
            ".1f",
        ),
        row(f"{jobs} jobs through 2 slots (s)", "drain", gpuq.drain_s, tsp.drain_s, ".2f"),
        beside(
            f"  floor: the {jobs} submissions alone, gpuq --api-only",
            gpuq.submitted_s,
            tsp.drain_s,
            ".2f",
        ),
        row(accepted, "accept", gpuq.accepted_per_s, tsp.accepted_per_s, ".0f"),
        beside(
            "  the same, gpuq --api-only (no scheduler)"
            + (f" ({gpuq.refused_api_only} refused)" if gpuq.refused_api_only else ""),
            gpuq.accepted_api_only_per_s,
            tsp.accepted_per_s,
            ".0f",
        ),
        row(
            f"polls/s of one job, 1 client for {seconds:g} s (gpuq: wrk, 1 connection)",
            "poll",
            gpuq.polls_per_s,
            tsp.polls_per_s,
            ".0f",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="jobs timed one at a time, per way")
    parser.add_argument("--jobs", type=int, default=200, help="jobs through 2 slots")
    parser.add_argument("--seconds", type=int, default=3, help="how long clients submit")
    args = parser.parse_args()
    if shutil.which("tsp") is None:
        raise SystemExit("tsp is missing: `make bench` installs task-spooler")
    t = measure_tsp(args.runs, args.jobs, args.seconds)
    g = measure_gpuq(args.runs, args.jobs, args.seconds)
    headers = ["what", "gpuq", "task-spooler", "gpuq / tsp", "target", "met"]
    print(table(headers, rows(g, t, args.jobs, args.seconds)))


if __name__ == "__main__":
    main()
