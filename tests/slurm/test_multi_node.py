"""Jobs on two nodes (`resources.nodes`) of the real test cluster (two slurmd's on this
host, partition `multi`): a builtin Keras job trained with MultiWorkerMirroredStrategy,
the TensorFlow and PyTorch examples as command jobs, a node's training process killed,
a cancel, and `gpuq serve` killed while a job runs on both nodes."""

import json
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import TINY_KERAS
from tests.e2e.server import Server
from tests.slurm.conftest import SlurmCluster, wait_for
from tests.slurm.test_executor import FINAL, slurm_server, submit, until

ROOT = Path(__file__).resolve().parents[2]
#: each worker TensorFlow and PyTorch on one thread: the suite shares 2 cores
ONE_THREAD = {
    "TF_NUM_INTRAOP_THREADS": "1",
    "TF_NUM_INTEROP_THREADS": "1",
    "OMP_NUM_THREADS": "1",
}


@pytest.fixture
def server(slurm_cluster: SlurmCluster, tmp_path: Path) -> Iterator[Server]:
    server = slurm_server(
        slurm_cluster,
        tmp_path / "gpuq",
        GPUQ_SLURM_PARTITION=slurm_cluster.multi_partition,
        GPUQ_RETRY_BACKOFF_S="0.5",
        **ONE_THREAD,
    )
    server.start()
    yield server
    try:
        for job in httpx.get(f"{server.url}/v1/jobs").json()["jobs"]:
            if job["status"] not in FINAL:
                httpx.post(f"{server.url}/v1/jobs/{job['id']}/cancel")
                server.wait(job["id"], FINAL, timeout_s=60)
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.kill()


def two_nodes(**fields: Any) -> dict[str, Any]:
    return {
        "name": "two-nodes",
        "keras": {
            **TINY_KERAS,
            "model": {
                "builtin": "mlp",
                "hidden_units": [16],
                "outputs": 3,
                "output_activation": "softmax",
            },
            "data": {
                "source": "synthetic",
                "samples": 512,
                "features": 8,
                "task": "classification",
                "classes": 3,
            },
            "loss": "sparse_categorical_crossentropy",
            "metrics": ["accuracy"],
            "validation_split": 0.25,
            **fields,
        },
        "resources": {"gpus": 1, "nodes": 2},
    }


def command(argv: list[str], **spec: Any) -> dict[str, Any]:
    return {
        "name": "two-nodes",
        "kind": "command",
        "command": {"argv": argv},
        "resources": {"gpus": 1, "nodes": 2},
        **spec,
    }


def run_dir(server: Server, job_id: int, attempt: int) -> Path:
    return server.home / "runs" / str(job_id) / str(attempt)


def log(server: Server, job_id: int) -> str:
    return httpx.get(f"{server.url}/v1/jobs/{job_id}/logs").text


def lines_of(text: str, node: str) -> list[str]:
    return [
        line.removeprefix(f"[{node}] ")
        for line in text.splitlines()
        if line.startswith(f"[{node}] ")
    ]


def test_admission_knows_the_partitions_nodes(server, slurm_cluster):
    def refused(resources: dict[str, int]) -> tuple[list[str], str]:
        response = httpx.post(f"{server.url}/v1/jobs", json=command(["true"], resources=resources))
        assert response.status_code == 422, response.text
        [error] = response.json()["detail"]
        return error["loc"], error["msg"]

    assert refused({"gpus": 1, "nodes": 3}) == (
        ["body", "resources", "nodes"],
        "3 nodes requested but the Slurm partition has 2 GPU node(s)",
    )
    gpus = slurm_cluster.gpus + 1
    assert refused({"gpus": gpus, "nodes": 2}) == (
        ["body", "resources", "gpus"],
        f"{gpus} GPUs per node requested but in the Slurm partition its 2 largest have "
        f"{slurm_cluster.gpus} GPU(s)",
    )
    assert httpx.get(f"{server.url}/v1/jobs").json()["jobs"] == []


def test_a_keras_job_trains_one_model_on_both_nodes(server, slurm_cluster):
    job_id = submit(server, two_nodes(epochs=3, batch_size=64))
    job = server.wait(job_id, FINAL, timeout_s=180)
    assert job["status"] == "succeeded", (job["message"], log(server, job_id))
    n1, n2 = slurm_cluster.nodes
    assert job["num_replicas"] == 2  # one CPU replica per node on simulated GPUs
    assert [(n["rank"], n["node"]) for n in job["nodes"]] == [(0, n1), (1, n2)]
    run = run_dir(server, job_id, 1)
    announced = [json.loads((run / "nodes" / f"{r}.json").read_text()) for r in (0, 1)]
    assert [a["slurm_node_id"] for a in announced] == ["0", "1"]
    assert all(a["gpus"] for a in announced)  # Slurm's CUDA_VISIBLE_DEVICES on each
    text = log(server, job_id)
    said = {node: "\n".join(lines_of(text, node)) for node in (n1, n2)}
    for rank, node in enumerate((n1, n2)):
        assert f"gpuq: worker {rank} of 2 in multi-worker mode" in said[node], text
    # Each worker trained on its own shard, and the all-reduced gradients left both with
    # the same weights.
    pattern = r"its shard of (\d+) samples \(sha256 (\w+)\); final weights sha256 (\w+)"
    (size1, shard1, weights1), (size2, shard2, weights2) = (
        re.search(pattern, said[node]).groups() for node in (n1, n2)
    )
    assert shard1 != shard2 and int(size1) + int(size2) == 384
    assert weights1 == weights2
    # The chief alone wrote the results; the other node's scratch is gone.
    assert (run / "artifacts" / "model.keras").is_file()
    assert (run / "checkpoints" / "training_metadata.json").is_file()
    assert not (run / "nodes" / "1").exists()
    metrics = httpx.get(f"{server.url}/v1/jobs/{job_id}/metrics").json()
    assert [e["epoch"] for e in metrics["epochs"]] == [1, 2, 3]
    assert {"loss", "accuracy", "val_loss", "val_accuracy"} <= set(metrics["epochs"][-1])
    shown = server.cli("show", str(job_id))
    assert f"nodes: {n1} (chief, GPUs " in shown and f"{n2} (GPUs " in shown


@pytest.mark.parametrize("example", ["tf_multi_worker.py", "ddp_gloo.py"])
def test_the_examples_run_unchanged_as_two_node_command_jobs(server, slurm_cluster, example):
    job_id = submit(server, command([sys.executable, str(ROOT / "examples" / example)]))
    job = server.wait(job_id, FINAL, timeout_s=180)
    text = log(server, job_id)
    assert job["status"] == "succeeded", (job["message"], text)
    for node in slurm_cluster.nodes:
        assert any("all-reduce check passed" in line for line in lines_of(text, node)), text
    saved = "model.weights.h5" if example.startswith("tf") else "model.pt"
    assert (run_dir(server, job_id, 1) / "artifacts" / saved).is_file()


def _training_pid(worker_pid: int) -> int:
    children = Path(f"/proc/{worker_pid}/task/{worker_pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def test_a_node_whose_training_dies_ends_the_job_naming_it_and_a_retry_resumes(
    server, slurm_cluster
):
    spec = two_nodes(
        epochs=6,
        batch_size=32,
        data={
            "source": "synthetic",
            "samples": 6000,
            "features": 8,
            "task": "classification",
            "classes": 3,
        },
    )
    spec.update(max_retries=1, time_limit_s=600)
    spec["resources"]["collective_timeout_s"] = 120
    job_id = submit(server, spec)
    until(server, job_id, lambda j: (j["progress"].get("epoch") or 0) >= 3, timeout_s=180)
    run = run_dir(server, job_id, 1)
    second = json.loads((run / "nodes" / "1.json").read_text())
    os.kill(_training_pid(second["pid"]), signal.SIGKILL)
    killed_at = time.monotonic()
    job = until(server, job_id, lambda j: j["attempt"] == 2 or j["status"] in FINAL, 120)
    assert time.monotonic() - killed_at < 60  # srun ended the chief too: no hang
    first = job["previous_attempts"][0]
    n2 = slurm_cluster.nodes[1]
    assert first["reason"] == "signal", first
    assert first["message"].startswith(f"node {n2}: the training process was killed by SIGKILL")
    job = server.wait(job_id, FINAL, timeout_s=180)
    assert job["status"] == "succeeded", (job["message"], log(server, job_id))
    metrics = httpx.get(f"{server.url}/v1/jobs/{job_id}/metrics").json()
    assert [e["epoch"] for e in metrics["epochs"]] == [1, 2, 3, 4, 5, 6]
    events = (run_dir(server, job_id, 2) / "events.jsonl").read_text().splitlines()
    resumed = [json.loads(e) for e in events if '"resumed"' in e]
    assert resumed and resumed[0]["epoch"] >= 2  # after the chief's last checkpoint


TRAPS_SIGTERM = """
import os, signal, sys, time
from pathlib import Path
def stop(*_):
    Path(sys.argv[1], "term-" + os.environ["RANK"]).write_text(os.environ["GPUQ_NODE"])
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
time.sleep(300)
"""


def test_a_cancel_reaches_every_nodes_process(server, slurm_cluster, tmp_path):
    job_id = submit(server, command([sys.executable, "-c", TRAPS_SIGTERM, str(tmp_path)]))
    until(server, job_id, lambda j: len(j["nodes"]) == 2 and j["status"] == "running", 90)
    wait_for("both nodes ready", lambda: log(server, job_id).count("] ready") == 2, 60)
    httpx.post(f"{server.url}/v1/jobs/{job_id}/cancel").raise_for_status()
    job = server.wait(job_id, FINAL, timeout_s=60)
    assert job["status"] == "cancelled"
    assert {p.read_text() for p in tmp_path.glob("term-*")} == set(slurm_cluster.nodes)


def test_killing_gpuq_serve_during_a_two_node_job_loses_nothing(server, slurm_cluster):
    code = "import time, os; print('node', os.environ['GPUQ_NODE_RANK'], flush=True); time.sleep(6)"
    job_id = submit(server, command([sys.executable, "-c", code]))
    until(server, job_id, lambda j: j["status"] == "running", 90)
    server.kill(signal.SIGKILL)
    server.start()
    job = server.wait(job_id, FINAL, timeout_s=90)
    assert job["status"] == "succeeded", job["message"]
    assert len(job["nodes"]) == 2
    text = log(server, job_id)
    assert all(f"[{n}] node {r}" in text for r, n in enumerate(slurm_cluster.nodes)), text
