"""Training through gpuq beside a bare Keras script, in one run: throughput, start latency,
the progress callback's cost, and replica scaling.

The model is the one of issue 7: 600 inputs → 512 → 128 → 128 → 1, global batch 2,000,
on 1 and 2 replicas (gpuq's simulated GPUs: logical CPU devices, as the bare script makes
them too). Throughput is samples per second in the median epoch after the first (the
first holds tracing), so it includes what gpuq does at each epoch's end (checkpoint,
TensorBoard summary) but not a stall of the machine's in one epoch (`rate`). Start
latency is measured from submit (gpuq) or from process spawn (bare). Usage:
    python -m bench.training [--samples 40000] [--epochs 4] [--repeats 1]
"""

import argparse
import itertools
import json
import os
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.common import PYTHON, ROOT, gpuq_server, table, wait_ended

BATCH = 2000


@dataclass
class Run:
    """One training run's figures; times in seconds from submit (gpuq) or spawn (bare)."""

    samples_per_s: float
    first_step_s: float
    started_s: float  #: bare: TensorFlow imported; gpuq: the training process spawned
    callback_us_per_step: float | None = None


def rate(samples: int, epoch_ends: list[float]) -> float:
    """Samples per second in the median epoch of 2..N. The median rather than the span:
    this machine now and then stalls a process for ~0.6 s (epochs of 0.6 s measured 1.2
    s, bare and gpuq alike, at random), and one such stall in a 2 s span moves a ratio
    of two runs by 20 %. What gpuq does at every epoch's end still counts."""
    return samples / statistics.median(b - a for a, b in itertools.pairwise(epoch_ends))


def bare(replicas: int, samples: int, epochs: int, *, progress: bool = False) -> Run:
    argv = [PYTHON, "-m", "bench.bare_train", f"--replicas={replicas}", f"--samples={samples}"]
    argv += [f"--epochs={epochs}", f"--batch={BATCH}"] + (["--progress"] if progress else [])
    spawned = time.time()
    out = subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, check=True, env=_quiet()
    ).stdout
    report = json.loads(out.strip().splitlines()[-1])
    spent = report["callback_s"]
    return Run(
        samples_per_s=rate(samples, report["epoch_ends"]),
        first_step_s=report["first_step_at"] - spawned,
        started_s=report["imported_at"] - spawned,
        callback_us_per_step=None if spent is None else spent / report["steps"] * 1e6,
    )


def job_spec(replicas: int, samples: int, epochs: int) -> dict[str, Any]:
    return {
        "name": f"bench-{replicas}",
        "kind": "keras",
        "keras": {
            "model": {"builtin": "mlp", "hidden_units": [512, 128, 128], "outputs": 1},
            "data": {"source": "synthetic", "samples": samples, "features": 600},
            "epochs": epochs,
            "batch_size": BATCH,
            "optimizer": "adam",
            "learning_rate": 0.001,
            "loss": "mse",
            "metrics": ["mae"],
            "validation_split": 0.0,
        },
        "resources": {"gpus": replicas},
    }


def through_gpuq(client: httpx.Client, home: Path, replicas: int, samples: int, epochs: int) -> Run:
    submitted = time.time()
    job = client.post("/v1/jobs", json=job_spec(replicas, samples, epochs)).json()
    job = wait_ended(client, job)
    if job["status"] != "succeeded":
        raise RuntimeError(f"the benchmark's job ended {job['status']}: {job['message']}")
    run = home / "runs" / str(job["id"]) / "1"
    runner = json.loads((run / "runner.json").read_text())
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    first_step = next(e["ts"] for e in events if e["event"] == "step")
    epoch_ends = [e["ts"] for e in events if e["event"] == "epoch"]
    return Run(
        samples_per_s=rate(samples, epoch_ends),
        first_step_s=first_step - submitted,
        started_s=runner["train_spawned_at"] - submitted,
    )


def warm_ready(client: httpx.Client, timeout_s: float = 120) -> None:
    """Waits until the server's warm pool is full (GPUQ_WARM_WORKERS processes ready)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        metrics = client.get("/metrics").text
        if 'gpuq_warm_workers{state="starting"} 0.0' in metrics:
            return
        time.sleep(0.1)
    raise RuntimeError("the warm pool never got ready")


def start_latency(repeats: int) -> None:
    """Submit → first training step: a bare script's own start (process, TensorFlow import,
    first step) against gpuq with and without a warm worker, interleaved, one replica."""
    samples, epochs = 4_000, 2  # two epochs: the runs report a rate too
    bares, colds, warms = [], [], []
    with (
        tempfile.TemporaryDirectory(prefix="gpuq-cold-") as cold_home,
        tempfile.TemporaryDirectory(prefix="gpuq-warm-") as warm_home,
        gpuq_server(home=Path(cold_home), GPUQ_WARM_WORKERS="0", TF_CPP_MIN_LOG_LEVEL="2") as c,
        gpuq_server(home=Path(warm_home), GPUQ_WARM_WORKERS="1", TF_CPP_MIN_LOG_LEVEL="2") as w,
        httpx.Client(base_url=c, timeout=60) as cold,
        httpx.Client(base_url=w, timeout=60) as warm,
    ):
        for _ in range(repeats):
            warm_ready(warm)  # nothing else runs meanwhile: the last warm start's refill
            bares.append(bare(1, samples, epochs).first_step_s)
            colds.append(through_gpuq(cold, Path(cold_home), 1, samples, epochs).first_step_s)
            warm_ready(warm)
            warms.append(through_gpuq(warm, Path(warm_home), 1, samples, epochs).first_step_s)
    b, c_, w_ = (statistics.median(x) for x in (bares, colds, warms))
    print(f"Start: submit (gpuq) or spawn (bare) → first training step, median of {repeats}")
    rows = [
        ["bare script: spawn → first step (s)", f"{b:.2f}", "", ""],
        ["gpuq, cold worker (s)", f"{c_:.2f}", f"{c_ - b:+.2f} s", "≤ +0.3 s"],
        ["gpuq, warm worker (s)", f"{w_:.2f}", f"{w_ / b:.2f}x", "≤ 0.5x"],
    ]
    print(table(["what", "seconds", "vs bare", "target"], rows))


def _quiet() -> dict[str, str]:
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}


def median_run(runs: list[Run]) -> Run:
    def mid(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    return Run(
        samples_per_s=statistics.median(r.samples_per_s for r in runs),
        first_step_s=statistics.median(r.first_step_s for r in runs),
        started_s=statistics.median(r.started_s for r in runs),
        callback_us_per_step=mid([r.callback_us_per_step for r in runs]),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=40_000)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1, help="runs of each; medians shown")
    parser.add_argument("--starts", type=int, default=3, help="start-latency runs of each")
    args = parser.parse_args()
    n, e = args.samples, args.epochs
    bares: dict[int, list[Run]] = {1: [], 2: []}
    gpuqs: dict[int, list[Run]] = {1: [], 2: []}
    reported: list[Run] = []
    # The first TensorFlow import after a while reads it from disk; neither side pays that.
    subprocess.run([PYTHON, "-c", "import tensorflow"], env=_quiet(), capture_output=True)
    with (
        tempfile.TemporaryDirectory(prefix="gpuq-bench-") as tmp,
        gpuq_server(home=Path(tmp), TF_CPP_MIN_LOG_LEVEL="2") as url,
        httpx.Client(base_url=url, timeout=60) as client,
    ):
        for _ in range(args.repeats):  # side by side, interleaved, so drift hits both
            for replicas in (1, 2):
                bares[replicas].append(bare(replicas, n, e))
                warm_ready(client)
                gpuqs[replicas].append(through_gpuq(client, Path(tmp), replicas, n, e))
            reported.append(bare(2, n, e, progress=True))
    b = {r: median_run(runs) for r, runs in bares.items()}
    g = {r: median_run(runs) for r, runs in gpuqs.items()}
    p = median_run(reported)
    print(
        f"Training: MLP 600→512→128→128→1, batch {BATCH}, {n} samples, {e} epochs, "
        f"median of {args.repeats}"
    )
    rows = []
    for replicas in (1, 2):
        rows.append(
            [
                str(replicas),
                f"{b[replicas].samples_per_s:,.0f}",
                f"{g[replicas].samples_per_s:,.0f}",
                f"{g[replicas].samples_per_s / b[replicas].samples_per_s:.3f}",
                f"{b[replicas].samples_per_s / replicas:,.0f}",
                f"{g[replicas].samples_per_s / replicas:,.0f}",
            ]
        )
    print(
        table(
            [
                "replicas",
                "bare samples/s",
                "gpuq samples/s",
                "gpuq / bare",
                "bare per replica",
                "gpuq per replica",
            ],
            rows,
        )
    )
    with_progress = p.samples_per_s / b[2].samples_per_s
    print(
        f"progress callback (2 replicas, bare script): {p.callback_us_per_step:.0f} µs per "
        f"step in the callback; samples/s with it / without it = {with_progress:.3f}"
    )
    rows = []
    for replicas in (1, 2):
        bb, gg = b[replicas], g[replicas]
        rows.append(
            [
                str(replicas),
                f"{bb.started_s:.2f}",
                f"{bb.first_step_s:.2f}",
                f"{gg.started_s * 1e3:.0f} ms",
                f"{gg.first_step_s:.2f}",
                f"{gg.first_step_s - bb.first_step_s:+.2f}",
            ]
        )
    print(
        table(
            [
                "replicas",
                "bare: TF imported (s)",
                "bare: first step (s)",
                "gpuq: submit → process spawned",
                "gpuq: submit → first step (s)",
                "gpuq adds (s)",
            ],
            rows,
        )
    )

    start_latency(args.starts)


if __name__ == "__main__":
    main()
