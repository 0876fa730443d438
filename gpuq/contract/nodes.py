"""A job on several nodes (`resources.nodes`): how its nodes find each other and say how
they ended, through the run directory that every node shares.

- `nodes/<rank>.json`: each node's announcement (its name, the address and port the
  others reach it at, its GPUs); once all are there, each node's program gets the same
  world (`world_environment`).
- `nodes/<rank>.exit.json`: how the node's program ended, and whether a signal reached
  the node first (it was stopped, by gpuq or by Slurm after another node failed).
- `nodes/<rank>/`: where the nodes other than the chief (rank 0) write what only the
  chief's copy of counts (events, TensorBoard); removed when they end.

`job_end` turns the nodes' ends into the job's `exit.json`: the node that failed first on
its own is named (`node`), a node that left no end is lost (`node_lost`). Standard library
only: the runner and each node's worker use it.
"""

import contextlib
import json
import os
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpuq.contract.rundir import RunDir, read_json, write_json_atomic

FOLDER = "nodes"


def announcement(
    rank: int, node: str, *, address: str, port: int, master_port: int | None, gpus: str | None
) -> dict[str, Any]:
    """What node `rank` tells the others: where to reach it, and its GPUs (Slurm's
    `CUDA_VISIBLE_DEVICES` on that node)."""
    record: dict[str, Any] = {
        "rank": rank,
        "node": node,
        "address": address,
        "port": port,
        "gpus": gpus,
    }
    if master_port is not None:
        record["master_port"] = master_port
    return record


def this_task() -> tuple[int, int, str]:
    """This Slurm task's rank, the number of tasks (one a node) and its node's name."""
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    return int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"]), node


def node_address(node: str) -> str:
    """Where the other nodes reach this one: Slurm's `NodeAddr` for it, else its host name."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        shown = subprocess.run(
            ["scontrol", "show", "node", node, "--oneliner"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        for word in shown.split():
            if word.startswith("NodeAddr="):
                return word.removeprefix("NodeAddr=")
    return socket.gethostname()


class HeldPort:
    """A TCP port for the job's program to serve on, held for it from the moment it is
    chosen until `close` (when the program has ended).

    Choosing a free port and letting it go before the program binds it races: in between,
    another job's choice or an outgoing connection may take it. The consumers (TensorFlow's
    gRPC server for `TF_CONFIG`, torch's TCPStore for `MASTER_PORT`) only take a port
    number, so the socket cannot be handed over; instead it stays bound here, not
    listening, with `SO_REUSEADDR`. Linux then lets a server that also sets `SO_REUSEADDR`
    (gRPC and torch's TCPStore both do) bind and listen on it, while the kernel never picks
    it for anyone else's port 0 or outgoing connection, and a plain bind of it fails.
    `SO_REUSEPORT` would not do: TensorFlow turns it off on its gRPC server.
    """

    def __init__(self) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("", 0))
        self.port = int(self._socket.getsockname()[1])

    def close(self) -> None:
        self._socket.close()


def meet(
    run: RunDir, record: dict[str, Any], nodes: int, timeout_s: float, hint: str
) -> list[dict[str, Any]]:
    """Writes this node's announcement `record` under `run` and waits for all `nodes`';
    every announcement, by rank. `TimeoutError` names the ranks missing, then `hint`."""
    folder = run.path / FOLDER
    folder.mkdir(exist_ok=True)
    write_json_atomic(folder / f"{record['rank']}.json", record, durable=False)
    deadline = time.monotonic() + timeout_s
    while len(world := read_announcements(run, nodes)) < nodes:
        if time.monotonic() > deadline:
            missing = sorted(set(range(nodes)) - {w["rank"] for w in world})
            raise TimeoutError(
                f"node ranks {missing} did not announce themselves in {folder} within "
                f"{timeout_s:g} s: {hint}"
            )
        time.sleep(0.05)
    return world


def read_announcements(run: RunDir, nodes: int) -> list[dict[str, Any]]:
    """The announcements written so far, by rank (a partial one is not there yet)."""
    found = []
    for rank in range(nodes):
        record = read_json(run.path / FOLDER / f"{rank}.json")
        if record is not None and record.get("rank") == rank:
            found.append(record)
    return found


def world_environment(world: list[dict[str, Any]], rank: int) -> dict[str, str]:
    """The variables node `rank`'s program finds the others by: TensorFlow's `TF_CONFIG`
    (worker 0 is the chief), torchrun's static rendezvous (one process per node), gpuq's."""
    chief = world[0]
    tf_config = {
        "cluster": {"worker": [f"{w['address']}:{w['port']}" for w in world]},
        "task": {"type": "worker", "index": rank},
    }
    return {
        "TF_CONFIG": json.dumps(tf_config),
        "MASTER_ADDR": str(chief["address"]),
        "MASTER_PORT": str(chief["master_port"]),
        "WORLD_SIZE": str(len(world)),
        "RANK": str(rank),
        "NODE_RANK": str(rank),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "GPUQ_NODES": str(len(world)),
        "GPUQ_NODE_RANK": str(rank),
        "GPUQ_NODE": str(world[rank]["node"]),
    }


def scratch(run: RunDir, rank: int) -> dict[str, str]:
    """Where a node other than the chief writes what only the chief's copy of counts."""
    folder = run.path / FOLDER / str(rank)
    (folder / "tensorboard").mkdir(parents=True, exist_ok=True)
    return {
        "GPUQ_EVENTS": str(folder / "events.jsonl"),
        "GPUQ_TENSORBOARD_DIR": str(folder / "tensorboard"),
    }


def end_path(run: RunDir, rank: int) -> Path:
    return run.path / FOLDER / f"{rank}.exit.json"


@dataclass(frozen=True)
class NodeEnd:
    """How one node's program ended."""

    rank: int
    node: str
    exit_code: int | None  #: None when a signal ended it
    signal: int | None
    ended_at: float
    #: a signal reached the node before its program ended: it was stopped, not failing
    stopped: bool

    @property
    def failed(self) -> bool:
        return self.exit_code != 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def read(cls, run: RunDir, rank: int) -> "NodeEnd | None":
        record = read_json(end_path(run, rank))
        try:
            return None if record is None else cls(**record)
        except TypeError:
            return None


def job_end(run: RunDir, nodes: int, launcher_code: int) -> dict[str, Any]:
    """The job's `exit.json` fields from its nodes' ends (`launcher_code`: how `srun`
    ended). All succeeded: exit 0. Else the node to blame: the first that failed on its own,
    then one that left no end (lost), then the first that failed at all; when every node
    was stopped (a cancel, a preemption), the chief speaks for the job."""
    names = {w["rank"]: w["node"] for w in read_announcements(run, nodes)}
    ends = {rank: NodeEnd.read(run, rank) for rank in range(nodes)}
    known = [end for end in ends.values() if end is not None]
    if not known:
        return {
            "exit_code": None,
            "signal": None,
            "spawn_error": f"srun exited {launcher_code} before any node's gpuq worker ran: "
            "see the job's log",
        }
    if len(known) == nodes and not any(end.failed for end in known):
        return {"exit_code": 0, "signal": None, "nodes": nodes}
    on_its_own = sorted((e for e in known if e.failed and not e.stopped), key=_ended_at)
    lost = [rank for rank, end in ends.items() if end is None]
    if on_its_own:
        blamed = on_its_own[0]
    elif lost:
        rank = lost[0]
        record: dict[str, Any] = {
            "exit_code": None,
            "signal": None,
            "nodes": nodes,
            "node_rank": rank,
            "node_lost": True,
        }
        if rank in names:  # one that never announced itself is named by its rank alone
            record["node"] = names[rank]
        return record
    else:
        chief = ends[0]
        assert chief is not None
        return {"exit_code": chief.exit_code, "signal": chief.signal, "nodes": nodes}
    return {
        "exit_code": blamed.exit_code,
        "signal": blamed.signal,
        "nodes": nodes,
        "node": blamed.node,
        "node_rank": blamed.rank,
    }


def _ended_at(end: NodeEnd) -> float:
    return end.ended_at
