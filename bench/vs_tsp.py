"""A trivial job (`["true"]`, `gpus: 0`) through gpuq and through task-spooler (`tsp`),
side by side: submit → finished as a client sees it, and 200 such jobs drained through
2 slots. gpuq's client is httpx in this process with long polls; tsp's is its own command.
Usage:
    python -m bench.vs_tsp [--runs 20] [--jobs 200]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable

import httpx

from bench.common import gpuq_server, table, wait_ended

TRUE = shutil.which("true") or "/bin/true"
SPEC = {"name": "true", "kind": "command", "command": {"argv": [TRUE]}, "resources": {"gpus": 0}}


def gpuq_submit_and_wait(client: httpx.Client) -> None:
    job = wait_ended(client, client.post("/v1/jobs", json=SPEC).json())
    assert job["status"] == "succeeded", job


def gpuq_drain(client: httpx.Client, count: int) -> None:
    ids = [client.post("/v1/jobs", json=SPEC).json()["id"] for _ in range(count)]
    for job_id in ids:
        wait_ended(client, client.get(f"/v1/jobs/{job_id}").json())


def tsp(env: dict[str, str], *args: str) -> str:
    return subprocess.run(["tsp", *args], env=env, capture_output=True, text=True).stdout


def tsp_submit_and_wait(env: dict[str, str]) -> None:
    job_id = tsp(env, TRUE).strip()
    tsp(env, "-w", job_id)


def tsp_drain(env: dict[str, str], count: int) -> None:
    ids = [tsp(env, TRUE).strip() for _ in range(count)]
    tsp(env, "-w", ids[-1])
    for job_id in ids:  # all done once the last is: FIFO over 2 slots
        tsp(env, "-w", job_id)


def timed(action: Callable[[], None], runs: int) -> list[float]:
    seconds = []
    for _ in range(runs):
        began = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - began)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=200)
    args = parser.parse_args()
    if shutil.which("tsp") is None:
        raise SystemExit("tsp is missing: `make bench` installs task-spooler")
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TS_SOCKET": f"{tmp}/tsp.socket", "TS_SAVELIST": f"{tmp}/list"}
        tsp(env, "-S", "2")
        tsp_one = timed(lambda: tsp_submit_and_wait(env), args.runs)
        tsp_all = timed(lambda: tsp_drain(env, args.jobs), 1)[0]
        tsp(env, "-K")
    with gpuq_server(GPUQ_MAX_CPU_JOBS="2") as url, httpx.Client(base_url=url, timeout=60) as c:
        gpuq_submit_and_wait(c)  # warm: the first launch imports more
        gpuq_one = timed(lambda: gpuq_submit_and_wait(c), args.runs)
        gpuq_all = timed(lambda: gpuq_drain(c, args.jobs), 1)[0]
    g, t = statistics.median(gpuq_one), statistics.median(tsp_one)
    one = "trivial job, submit → finished (median ms)"
    drain = f"{args.jobs} jobs through 2 slots (s)"
    rows = [
        [one, f"{g * 1e3:.1f}", f"{t * 1e3:.1f}", f"{g / t:.2f}"],
        [drain, f"{gpuq_all:.2f}", f"{tsp_all:.2f}", f"{gpuq_all / tsp_all:.2f}"],
    ]
    print(table(["what", "gpuq", "task-spooler", "gpuq / tsp"], rows))


if __name__ == "__main__":
    main()
