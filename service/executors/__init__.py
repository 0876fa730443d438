"""Where and how placed jobs run: the `Executor` interface and its implementations.

On a box the scheduler decides *which* job starts *when* and on *which* GPUs, and keeps
the books; an executor starts a placed job there, reports its exit, signals it, and finds
it again after a restart. A `QueueingExecutor` (Slurm) has a queue of its own: gpuq hands
it every admitted job and follows what it does. Every executor keeps the run-directory
protocol (`gpuq.contract`), so progress, logs, caps and diagnosis work the same whatever
runs the job.
"""

from service.executors.base import (
    Cluster,
    Executor,
    Exit,
    Launch,
    LaunchError,
    Node,
    QueueingExecutor,
    Started,
    Verdict,
    Waiting,
)
from service.executors.local import LocalExecutor

__all__ = [
    "Cluster",
    "Executor",
    "Exit",
    "Launch",
    "LaunchError",
    "LocalExecutor",
    "Node",
    "QueueingExecutor",
    "Started",
    "Verdict",
    "Waiting",
]
