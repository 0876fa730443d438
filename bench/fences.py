"""What a job's fence costs on this machine's cgroup v1 (`service.executors.fences`).

For each of N fences, as gpuq does for a job: make it with a job's limits (4 cores' quota,
8 GiB of host memory with no swap, 2048 processes, 3 of 4 GPUs denied), and a fresh process
(forked, like a runner) joins it by writing "0" to each controller's `cgroup.procs`: the
start path (target: under 5 ms). Then the end: the process, still running, is killed
through the fence (frozen, SIGKILLed, thawed, as a job's leftovers are), and its usage read
and the fence removed. Run as root:
    python -m bench.fences [--fences 200]
"""

import argparse
import os
import statistics
import time

from bench.common import table
from service.executors.fences.cgroup_files import remove_folder
from service.executors.fences.choice import cgroup_mounts
from service.executors.fences.shapes import FenceLimits
from service.executors.fences.v1 import CgroupV1Fences

JOB = FenceLimits(cpus=4, memory_mb=8192, pids=2048, denied_gpus=(1, 2, 3))


def joined_in(folders: tuple[str, ...]) -> tuple[int, float]:
    """A forked child that joined `folders` and then waits to be killed: its pid, and the
    seconds it took to join."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        started = time.perf_counter()
        for folder in folders:
            with open(os.path.join(folder, "cgroup.procs"), "w") as procs:
                procs.write("0")
        os.write(write, str(time.perf_counter() - started).encode())
        time.sleep(60)
        os._exit(0)
    os.close(write)
    took = float(os.read(read, 64))
    os.close(read)
    return pid, took


def one_fence(fences: CgroupV1Fences, name: str) -> tuple[float, float, float, float]:
    """Seconds to make the fence, to join it, to kill what runs in it, and to read its
    usage and remove it."""
    started = time.perf_counter()
    folders = fences.make(name, JOB)
    made = time.perf_counter() - started
    pid, joined = joined_in(folders)
    started = time.perf_counter()
    fences.kill(name)
    killed = time.perf_counter() - started
    os.waitpid(pid, 0)
    started = time.perf_counter()
    fences.usage(name)
    if not fences.remove(name):
        raise RuntimeError(f"fence {name} could not be removed")
    return made, joined, killed, time.perf_counter() - started


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fences", type=int, default=200)
    args = parser.parse_args()
    fences = CgroupV1Fences(cgroup_mounts().v1, parent=f"gpuq-bench-{os.getpid()}")
    try:
        runs = [one_fence(fences, f"job-{n}-0") for n in range(args.fences)]
    finally:
        for parent in set(fences.parents.values()):
            remove_folder(parent)
    columns = {
        "make": [r[0] for r in runs],
        "join": [r[1] for r in runs],
        "start path (make + join)": [r[0] + r[1] for r in runs],
        "kill a running process": [r[2] for r in runs],
        "usage + remove": [r[3] for r in runs],
    }
    rows = [
        (what, f"{statistics.median(s) * 1e3:.2f}", f"{p95(s) * 1e3:.2f}")
        for what, s in columns.items()
    ]
    print(f"{args.fences} fences, cgroup v1, {len(set(fences.parents.values()))} controllers")
    print(table(["step", "median ms", "p95 ms"], rows))


if __name__ == "__main__":
    main()
