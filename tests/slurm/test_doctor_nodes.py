"""`gpuq doctor --nodes N` against the real two-node test cluster: the probe runs on the
nodes through srun, and what a node lacks is named with what to do about it."""

import json
import subprocess
from pathlib import Path

from tests.e2e.server import GPUQ
from tests.slurm.conftest import SlurmCluster


def doctor(cluster: SlurmCluster, home: Path, *args: str, **env: str) -> tuple[int, str]:
    done = subprocess.run(
        [*GPUQ, "doctor", *args],
        env={
            **cluster.client_env(),
            "GPUQ_EXECUTOR": "slurm",
            "GPUQ_SLURM_PARTITION": cluster.multi_partition,
            "GPUQ_HOME": str(home),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.returncode, done.stdout + done.stderr


def checks(out: str) -> dict[str, dict]:
    report = json.loads(out[: out.rindex("}") + 1])
    return {c["name"]: c for c in report["checks"]}


def test_both_nodes_pass_every_check(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    code, out = doctor(slurm_cluster, tmp_path, "--nodes", "2", "--json")
    assert code == 0, out
    found = checks(out)
    assert {name: c["status"] for name, c in found.items()} == {
        "compute nodes": "pass",
        "interpreter": "pass",
        "TensorFlow": "pass",
        "shared GPUQ_HOME": "pass",
        "ports between nodes": "pass",
    }
    assert found["compute nodes"]["detail"].endswith("gpuq-n1, gpuq-n2")
    assert (
        found["ports between nodes"]["detail"] == "every node reached every other (2 connections)"
    )
    assert list((tmp_path / "doctor").iterdir()) == []  # the probe's folder is removed


def test_an_interpreter_the_nodes_lack_is_named(slurm_cluster: SlurmCluster, tmp_path: Path):
    code, out = doctor(
        slurm_cluster, tmp_path, "--nodes", "2", GPUQ_SLURM_PYTHON="/opt/none/python"
    )
    assert code == 1, out
    assert "✗  compute nodes  no node ran /opt/none/python -m service.doctor.node_probe" in out
    assert "execve(): /opt/none/python: No such file or directory" in out
    assert "GPUQ_SLURM_PYTHON must be gpuq's interpreter" in out


def test_more_nodes_than_the_partition_has(slurm_cluster: SlurmCluster, tmp_path: Path):
    code, out = doctor(slurm_cluster, tmp_path, "--nodes", "3")
    assert code == 1, out
    assert "3 node(s) asked for, but partition multi has 2 (gpuq-n1, gpuq-n2)" in out


def test_nodes_is_for_the_slurm_executor(slurm_cluster: SlurmCluster, tmp_path: Path):
    code, out = doctor(slurm_cluster, tmp_path, "--nodes", "2", GPUQ_EXECUTOR="local")
    assert code == 2, out
    assert "Invalid value for '--nodes'" in out and "GPUQ_EXECUTOR=slurm" in out
