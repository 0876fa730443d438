"""A builtin Keras job on two nodes trains one model on both nodes' shards, not one model per
node: gpuq's trainer (`worker.train`) in two processes, wired to each other as `worker.node`
wires them on two Slurm nodes, beside the same trainer as a lone worker on node 0's shard
and on both shards' batches together."""

import io
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest

from gpuq.contract.device_plan import DevicePlan
from gpuq.contract.nodes import HeldPort, announcement, scratch, world_environment
from gpuq.contract.rundir import RunDir
from gpuq.contract.runspec import RunSpec, runner_environment
from gpuq.contract.spec import JobSpec

#: real Keras training in subprocesses: `make test` runs it, `make check` does not
pytestmark = pytest.mark.e2e

#: 64 samples a node, 4 steps of 16 on each: one epoch, global batch 32
SAMPLES, BATCH, STEPS = 128, 32, 4
#: each trainer on one thread: the suite shares 2 cores
ONE_THREAD = {
    "TF_NUM_INTRAOP_THREADS": "1",
    "TF_NUM_INTEROP_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "TF_CPP_MIN_LOG_LEVEL": "2",
}
FINAL_WEIGHTS = re.compile(r"final weights sha256 (\w+)")


def job(folder: Path, x: np.ndarray, y: np.ndarray, batch_size: int) -> RunDir:
    """A run directory for a two-node builtin job on `x`, `y` (unshuffled, so that each
    step's samples are known). SGD moves the weights in proportion to the gradient, so
    whether it was all-reduced shows plainly and float noise stays noise."""
    run = RunDir(folder)
    run.create()
    np.savez(folder / "data.npz", x=x, y=y)
    spec = JobSpec.model_validate(
        {
            "name": "two-nodes",
            "keras": {
                "model": {"builtin": "mlp", "hidden_units": [16], "outputs": 1},
                "data": {"source": "npz", "path": str(folder / "data.npz")},
                "epochs": 1,
                "batch_size": batch_size,
                "optimizer": "sgd",
                "learning_rate": 0.1,
                "loss": "mse",
                "shuffle": False,
                "seed": 7,
            },
            "resources": {"gpus": 1, "nodes": 2},
        }
    )
    runspec = RunSpec(job_id=1, attempt=1, spec=spec, devices=DevicePlan.cpu())
    run.spec.write_text(runspec.model_dump_json())
    return run


def start(run: RunDir, nodes: int, ports: list[HeldPort]) -> list[subprocess.Popen[str]]:
    """The job's trainer as each of `nodes` workers, in the environment `worker.node` gives
    it: the runner's, then the world's (`TF_CONFIG`, `GPUQ_NODES`, ...), on ports held for
    it (added to `ports`, to be let go once the trainers end). With `nodes=1`, one worker
    alone in the job's multi-node loop."""
    held = [HeldPort() for _ in range(nodes + 1)]
    ports += held
    world = [
        announcement(
            rank,
            f"n{rank + 1}",
            address="127.0.0.1",
            port=held[rank].port,
            master_port=held[-1].port if rank == 0 else None,
            gpus=None,
        )
        for rank in range(nodes)
    ]
    runspec = RunSpec.model_validate_json(run.spec.read_text())
    base = {**runner_environment(os.environ, runspec, run), **ONE_THREAD}
    return [
        subprocess.Popen(
            [sys.executable, "-P", "-m", "worker.train", str(run.path)],
            env={**base, **world_environment(world, rank), **(scratch(run, rank) if rank else {})},
            cwd=run.path,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for rank in range(nodes)
    ]


def weights(run: RunDir) -> dict[str, np.ndarray]:
    """The layers' weights of the model the chief saved, by their path in its .h5."""
    with zipfile.ZipFile(run.artifacts / "model.keras") as saved:
        h5 = io.BytesIO(saved.read("model.weights.h5"))
    found: dict[str, np.ndarray] = {}

    def keep(name: str, item: object) -> None:
        if isinstance(item, h5py.Dataset):
            found[name] = item[()]

    with h5py.File(h5, "r") as f:
        f["layers"].visititems(keep)
    assert found
    return found


def farthest(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    assert a.keys() == b.keys()
    return max(float(np.max(np.abs(a[name] - b[name]))) for name in a)


def test_a_two_node_job_trains_one_model_on_both_shards_not_each_node_on_its_own(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((SAMPLES, 8), dtype=np.float32)
    y = (x @ rng.standard_normal((8, 1), dtype=np.float32)).astype("float32")
    # Node r's shard is every 2nd sample from r on; its step i, the shard's i-th 16.
    shards = [(x[r::2].reshape(STEPS, -1, 8), y[r::2].reshape(STEPS, -1, 1)) for r in (0, 1)]
    x_both, y_both = (
        np.concatenate([s[k] for s in shards], axis=1).reshape(SAMPLES, -1) for k in (0, 1)
    )
    two_nodes = job(tmp_path / "two-nodes", x, y, BATCH)
    # The same steps on one worker: node 0's 16 samples each (as node 0 would train had it
    # not reached node 1), and both nodes' 32 together (what the all-reduce makes of them).
    alone = job(tmp_path / "alone", x[0::2], y[0::2], BATCH // 2)
    together = job(tmp_path / "together", x_both, y_both, BATCH)
    ports: list[HeldPort] = []
    trainers = start(two_nodes, 2, ports) + start(alone, 1, ports) + start(together, 1, ports)
    try:
        outputs = [trainer.communicate(timeout=180)[0] for trainer in trainers]
    finally:
        for trainer in trainers:
            if trainer.poll() is None:
                os.killpg(trainer.pid, 9)
                trainer.wait()
        for port in ports:
            port.close()
    for trainer, output in zip(trainers, outputs, strict=True):
        assert trainer.returncode == 0, output[-3000:]
    chief, second = (FINAL_WEIGHTS.findall(output) for output in outputs[:2])
    assert chief == second and len(chief) == 1  # the nodes are replicas of one model
    trained = weights(two_nodes)
    # Float noise apart, the model of both shards' batches: which also shows that the three
    # started from the same weights, so that differing from node 0's own is the all-reduce.
    assert farthest(trained, weights(together)) < 1e-5
    assert farthest(trained, weights(alone)) > 1e-3
