"""`gpuq doctor --nodes N`: checks what a job on N nodes of the Slurm partition needs of
them, by running `service.doctor.node_probe` on N nodes with `srun` as gpuq would run its
workers: gpuq's interpreter (`GPUQ_SLURM_PYTHON`) on every node, `GPUQ_HOME` shared by
all of them and by this host, and TCP between every pair of nodes."""

import json
import shlex
import shutil
import subprocess
import sys
import uuid
from typing import Any

from gpuq.contract.nodes import FOLDER
from gpuq.contract.rundir import read_json
from service.doctor.node_probe import MARK, package_version
from service.doctor.report import Check
from service.executors.slurm import commands
from service.settings import Settings

#: srun waits for the nodes while the partition is busy; past this the doctor gives up
SRUN_TIMEOUT_S = 600.0
SRUN_HINT = "run `gpuq doctor --nodes` where `gpuq serve` runs: a host with Slurm's srun"
HOME_HINT = (
    "put GPUQ_HOME on storage every node mounts at the same path (NFS, Lustre, ...): "
    "a job's nodes meet in its run directory"
)


def node_checks(settings: Settings, nodes: int) -> list[Check]:
    """Runs the probe on `nodes` nodes and judges what they said."""
    python = settings.slurm_python or sys.executable
    where = (
        f"partition {settings.slurm_partition}"
        if settings.slurm_partition
        else "the default partition"
    )
    try:
        listed = commands.parse_sinfo(
            commands.run_command(commands.sinfo_argv(settings.slurm_partition))
        )
    except commands.SlurmError as exc:
        return [Check.fail("compute nodes", str(exc), SRUN_HINT)]
    if len(listed) < nodes:
        names = ", ".join(n.node for n in listed) or "none"
        return [
            Check.fail(
                "compute nodes",
                f"{nodes} node(s) asked for, but {where} has {len(listed)} ({names})",
                "ask for fewer, or set GPUQ_SLURM_PARTITION to a larger partition",
            )
        ]
    folder = settings.home / "doctor" / uuid.uuid4().hex[:12]
    (folder / FOLDER).mkdir(parents=True)
    argv = srun_argv(settings, nodes, python, str(folder))
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=SRUN_TIMEOUT_S)
        seen_here = {
            rank: read_json(folder / FOLDER / f"{rank}.result.json") for rank in range(nodes)
        }
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [Check.fail("srun", f"{shlex.join(argv[:6])} ...: {exc}", SRUN_HINT)]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    said = [json.loads(line.removeprefix(MARK)) for line in _marked(done.stdout)]
    words = (done.stderr.strip() or done.stdout.strip()).splitlines()
    return checks_from_probe(
        said,
        seen_here,
        nodes=nodes,
        python=python,
        srun_failure=None if said else f"srun exited {done.returncode}: {' '.join(words[-3:])}",
        where=where,
    )


def srun_argv(settings: Settings, nodes: int, python: str, folder: str) -> list[str]:
    where = [f"--partition={settings.slurm_partition}"] if settings.slurm_partition else []
    if settings.slurm_account:
        where.append(f"--account={settings.slurm_account}")
    return [
        "srun",
        "--job-name=gpuq-doctor",
        f"--nodes={nodes}",
        f"--ntasks={nodes}",
        "--ntasks-per-node=1",
        "--time=5",
        *where,
        python,
        "-P",
        "-m",
        "service.doctor.node_probe",
        folder,
    ]


def checks_from_probe(
    said: list[dict[str, Any]],
    seen_here: dict[int, dict[str, Any] | None],
    *,
    nodes: int,
    python: str,
    srun_failure: str | None,
    where: str,
) -> list[Check]:
    """The checks from what each node printed (`said`) and what this host found in the
    shared folder (`seen_here`, by rank); `where`: the partition, in words."""
    if srun_failure is not None:
        return [
            Check.fail(
                "compute nodes",
                f"no node ran {python} -m service.doctor.node_probe: {srun_failure}",
                f"GPUQ_SLURM_PYTHON must be gpuq's interpreter at the same path on every node "
                f"of {where}, and {where} must have {nodes} nodes",
            )
        ]
    said = sorted(said, key=lambda s: s["rank"])
    names = [s["node"] for s in said]
    checks = [
        Check.ok(
            "compute nodes",
            f"srun ran the probe on {len(said)} node(s) of {where}: {', '.join(names)}",
        )
        if len(said) == nodes
        else Check.fail(
            "compute nodes",
            f"{len(said)} of {nodes} nodes reported: {', '.join(names)}",
            "see the nodes' state in `sinfo`",
        ),
        _interpreter(said, python),
        _tensorflow(said),
        _shared_home(said, seen_here, nodes),
    ]
    if nodes > 1:
        checks.append(_ports(said))
    return checks


def _interpreter(said: list[dict[str, Any]], python: str) -> Check:
    here = package_version("gpuq")
    versions = {s["node"]: s.get("gpuq") for s in said}
    other = {node: v for node, v in versions.items() if v != here}
    if other:
        return Check.fail(
            "interpreter",
            f"gpuq {here} here, but "
            + ", ".join(f"{v or 'no gpuq'} on {node}" for node, v in other.items()),
            f"install this gpuq into {python} on every node (GPUQ_SLURM_PYTHON)",
        )
    pythons = sorted({f"{s['python']} (Python {s['python_version']})" for s in said})
    return Check.ok("interpreter", f"gpuq {here} on every node: {', '.join(pythons)}")


def _tensorflow(said: list[dict[str, Any]]) -> Check:
    missing = [s["node"] for s in said if not s["frameworks"].get("tensorflow")]
    if missing:
        return Check.fail(
            "TensorFlow",
            f"not installed for gpuq's interpreter on {', '.join(missing)}",
            "builtin Keras jobs need it there (gpuq's `gpu` extra); command jobs bring their "
            "own framework",
        )
    return Check.ok("TensorFlow", "installed on every node")


def _shared_home(
    said: list[dict[str, Any]], seen_here: dict[int, dict[str, Any] | None], nodes: int
) -> Check:
    alone = [f"{s['node']} ({s['error']})" for s in said if "error" in s]
    if alone:
        return Check.fail("shared GPUQ_HOME", "; ".join(alone), HOME_HINT)
    unseen = [s["node"] for s in said if seen_here.get(s["rank"]) is None]
    if unseen:
        return Check.fail(
            "shared GPUQ_HOME",
            f"the nodes met, but this host does not see what {', '.join(unseen)} wrote there",
            HOME_HINT + ", this host included",
        )
    return Check.ok(
        "shared GPUQ_HOME", f"{nodes} node(s) and this host read and write the same folder"
    )


def _ports(said: list[dict[str, Any]]) -> Check:
    failed = [
        f"{s['node']} → {other}: {result}"
        for s in said
        for other, result in s["reached"].items()
        if result != "ok"
    ]
    if failed or not any(s["reached"] for s in said):
        return Check.fail(
            "ports between nodes",
            "; ".join(failed) or "no node got as far as connecting",
            "open TCP between the nodes (every port: each job picks free ones) and check "
            "that each node's Slurm NodeAddr is reachable from the others",
        )
    pairs = sum(len(s["reached"]) for s in said)
    return Check.ok("ports between nodes", f"every node reached every other ({pairs} connections)")


def _marked(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(MARK)]
