"""One node of a job that spans several machines (`resources.nodes`): its gpuq worker.

The job's runner (the Slurm batch step) starts one on every node of the job with
`srun --kill-on-bad-exit`. Each finds the others through the run directory, which every
node shares: it writes `nodes/<rank>.json` (its node, address and a port it holds for the
program, see `HeldPort`) and waits for everyone's. It then starts the job's process
(gpuq's trainer, or a command job's program) in a process group of its own with what its
framework needs to find the others: `TF_CONFIG` for TensorFlow; `MASTER_ADDR`,
`MASTER_PORT`, `WORLD_SIZE`, `RANK`, `LOCAL_RANK`, `NODE_RANK` for PyTorch (torchrun's
static rendezvous, one process per node); `GPUQ_NODE_RANK`, `GPUQ_NODES`, `GPUQ_NODE`.
Rank 0 is the chief: only its events are the job's; the others report to `nodes/<rank>/`,
which is removed when they end.

Every line the process prints is prefixed with the node's name (`[gpuq-n2] ...`), so the
job's one log tells the nodes apart. SIGTERM (a cancel, a preemption, the time limit) is
passed on to the process group. How the process ended goes to `nodes/<rank>.exit.json`,
with whether a signal reached this node first: the runner reads them all to say which node
failed (`ends`). Standard library only, like the runner.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gpuq.contract.nodes import (
    FOLDER,
    HeldPort,
    NodeEnd,
    announcement,
    end_path,
    meet,
    node_address,
    scratch,
    this_task,
    world_environment,
)
from gpuq.contract.rundir import RunDir, write_json_atomic
from worker.launch_plan import launch_plan
from worker.snapshot_copy import BadSnapshot

#: how long a node waits for the others to announce themselves
RENDEZVOUS_TIMEOUT_S = 180.0
READ_CHUNK = 65536


def main(argv: list[str]) -> int:
    run = RunDir(Path(argv[1]))
    rank, nodes, node = this_task()
    prefix = f"[{node}] ".encode()
    signals = PassedOnSignals()
    # Held until this worker exits, past the program's bind of them (see HeldPort).
    ports = [HeldPort() for _ in range(2 if rank == 0 else 1)]
    try:
        world = rendezvous(run, rank, nodes, node, ports)
        plan = launch_plan(run, on_node=True)
    except (TimeoutError, BadSnapshot) as exc:
        write_prefixed(prefix, f"gpuq: {exc}")
        return record_end(run, NodeEnd(rank, node, 1, None, time.time(), signals.reached))
    env = {**os.environ, **plan["env"], **world_environment(world, rank)}
    if rank > 0:
        env.update(scratch(run, rank))
    if rank == 0:
        from gpuq.contract.events import Event, EventWriter

        EventWriter(run.events).emit(Event.nodes, nodes=world)
    write_prefixed(
        prefix,
        f"gpuq: node {rank} of {nodes} ({node}), CUDA_VISIBLE_DEVICES="
        f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r}",
    )
    try:
        child = _start_program(plan, env)
    except OSError as exc:
        write_prefixed(prefix, f"gpuq: cannot start {plan['argv'][0]!r}: {exc}")
        return record_end(run, NodeEnd(rank, node, 127, None, time.time(), signals.reached))
    signals.started(child.pid)
    assert child.stdout is not None
    relay_output(child.stdout.fileno(), prefix)
    code = child.wait()
    if rank > 0:
        shutil.rmtree(run.path / FOLDER / str(rank), ignore_errors=True)
    end = NodeEnd(
        rank,
        node,
        code if code >= 0 else None,
        -code if code < 0 else None,
        time.time(),
        signals.reached,
    )
    return record_end(run, end)


class PassedOnSignals:
    """SIGTERM, SIGINT and SIGHUP to this node: kept, and passed on to the program's
    process group once it has one."""

    def __init__(self) -> None:
        self.seen: list[int] = []  #: the signals that reached this node before its program ended
        self._group: int | None = None
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._pass_on)

    @property
    def reached(self) -> bool:
        """Whether a signal reached this node (before its program ended)."""
        return bool(self.seen)

    def started(self, group: int) -> None:
        """The program leads process group `group` now; a stop that came while it was
        starting is passed on."""
        self._group = group
        if self.seen:
            os.killpg(group, self.seen[-1])

    def _pass_on(self, number: int, _: object) -> None:
        self.seen.append(number)
        if self._group is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._group, number)


def _start_program(plan: dict[str, Any], env: dict[str, str]) -> "subprocess.Popen[bytes]":
    """Starts the job's program in a process group of its own, its output on a pipe."""
    return subprocess.Popen(
        plan["argv"],
        env=env,
        cwd=plan["cwd"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        process_group=0,
    )


def rendezvous(
    run: RunDir, rank: int, nodes: int, node: str, ports: list[HeldPort]
) -> list[dict[str, Any]]:
    """Announces this node in the run directory with its `ports` (TF_CONFIG's, then the
    chief's MASTER_PORT) and waits for all `nodes`; every node's announcement, by rank."""
    record = announcement(
        rank,
        node,
        address=node_address(node),
        port=ports[0].port,
        master_port=ports[1].port if rank == 0 else None,
        gpus=os.environ.get("CUDA_VISIBLE_DEVICES"),
    )
    # For people and tests: this worker's pid, and Slurm's word for the node's place.
    record.update(pid=os.getpid(), slurm_node_id=os.environ.get("SLURM_NODEID"))
    return meet(
        run,
        record,
        nodes,
        RENDEZVOUS_TIMEOUT_S,
        "every node must see GPUQ_HOME at the same path (shared storage) and run gpuq's "
        "interpreter (GPUQ_SLURM_PYTHON); `gpuq doctor --nodes N` checks both",
    )


def relay_output(fd: int, prefix: bytes) -> None:
    """Copies the program's output to ours line by line, each line with `prefix`."""
    pending = b""
    while chunk := os.read(fd, READ_CHUNK):
        *lines, pending = (pending + chunk).split(b"\n")
        if lines:
            os.write(1, b"".join(prefix + line + b"\n" for line in lines))
    if pending:
        os.write(1, prefix + pending + b"\n")


def write_prefixed(prefix: bytes, line: str) -> None:
    """Writes `line` to our output, with `prefix`."""
    os.write(1, prefix + line.encode() + b"\n")


def record_end(run: RunDir, end: NodeEnd) -> int:
    """Writes how this node's program ended; this worker's own exit code."""
    write_json_atomic(end_path(run, end.rank), end.to_dict())
    if end.exit_code is not None:
        return end.exit_code
    return 128 + (end.signal or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
