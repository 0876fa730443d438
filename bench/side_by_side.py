"""This tree against another revision of gpuq, two `gpuq serve` side by side in one run,
jobs alternating between them: what a change to the per-job path did, measured closely
enough to see 10-20 % on a noisy machine, where one run of `bench.vs_tsp` and another an
hour later differ by more.

The revision is checked out into a temporary `git worktree` and served with this tree's
installed dependencies (so it must not need others). Each server gets the trivial job of
`bench.vs_tsp` (2 slots, no warm workers): `--jobs` blocking waits and `--jobs` polled
ones each way, in alternating order, then `--drains` drains of `--drain-jobs` each way.
Medians; the last column is this tree's over the revision's. Usage:
    python -m bench.side_by_side --base REV [--jobs 40] [--drains 4] [--drain-jobs 100]
"""

import argparse
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path

import httpx

from bench.common import ROOT, gpuq_server, table
from bench.vs_tsp import gpuq_blocking, gpuq_drain, gpuq_polled, timed

PAUSE_S = 0.03  #: between jobs, so that one's end does not overlap the next's start


@contextmanager
def worktree(revision: str) -> Iterator[Path]:
    """`revision` checked out in a temporary folder, removed after."""
    with tempfile.TemporaryDirectory(prefix="gpuq-bench-base-") as folder:
        tree = Path(folder) / "tree"
        git = ["git", "-C", str(ROOT)]
        subprocess.run([*git, "worktree", "add", "--detach", str(tree), revision], check=True)
        try:
            yield tree
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=False)


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.side_by_side")
    parser.add_argument("--base", required=True, help="the revision to compare with (git)")
    parser.add_argument("--jobs", type=int, default=40, help="single jobs each way, per kind")
    parser.add_argument("--drains", type=int, default=4, help="drains each way")
    parser.add_argument("--drain-jobs", type=int, default=100, help="jobs per drain")
    args = parser.parse_args()
    figures: dict[str, dict[str, list[float]]] = {
        side: {"blocking": [], "polled": [], "drain": []} for side in ("base", "this")
    }
    with ExitStack() as stack:
        base = stack.enter_context(worktree(args.base))
        clients = {}
        for side, tree in (("base", base), ("this", ROOT)):
            url = stack.enter_context(
                gpuq_server(tree=tree, GPUQ_MAX_CPU_JOBS="2", GPUQ_WARM_WORKERS="0")
            )
            clients[side] = stack.enter_context(httpx.Client(base_url=url, timeout=60))
            gpuq_blocking(clients[side])  # warm: the first launch imports more
        for n in range(args.jobs):
            for side in ("base", "this") if n % 2 == 0 else ("this", "base"):
                client = clients[side]
                time.sleep(PAUSE_S)
                figures[side]["blocking"] += timed(partial(gpuq_blocking, client), 1)
                time.sleep(PAUSE_S)
                figures[side]["polled"] += timed(partial(gpuq_polled, client), 1)
        for n in range(args.drains):
            for side in ("base", "this") if n % 2 == 0 else ("this", "base"):
                drain = partial(gpuq_drain, clients[side], args.drain_jobs)
                figures[side]["drain"] += timed(drain, 1)
    rows = []
    for what, label, scale, unit in (
        ("blocking", "submit → finished, blocking wait", 1e3, "ms"),
        ("polled", "submit → finished, polled every 10 ms", 1e3, "ms"),
        ("drain", f"{args.drain_jobs} jobs through 2 slots", 1.0, "s"),
    ):
        before = statistics.median(figures["base"][what]) * scale
        after = statistics.median(figures["this"][what]) * scale
        rows.append([f"{label} ({unit})", f"{before:.2f}", f"{after:.2f}", f"{after / before:.2f}"])
    print(
        f"This tree against {args.base}, side by side: {args.jobs} jobs of each kind and "
        f"{args.drains} drains each way, alternating; medians"
    )
    print(table(["what", args.base, "this tree", "this / base"], rows))


if __name__ == "__main__":
    main()
