"""`SlurmNodes`: the partition's GPU nodes, as `sinfo` lists them. It needs no executor, so
a process that only serves the API can list them (admission and `GET /v1/gpus` read it)."""

import time

from service.executors.base import Node
from service.executors.slurm import commands
from service.settings import Settings

#: how long `sinfo`'s answer is kept (every `GET /v1/gpus` and submission reads it)
NODES_EVERY_S = 2.0


class SlurmNodes:
    """The Slurm cluster's machines (a `Cluster`)."""

    def __init__(self, settings: Settings) -> None:
        self.partition = settings.slurm_partition
        self._nodes: tuple[float, list[Node]] | None = None  #: when asked, and the answer

    def nodes(self) -> list[Node]:
        """The partition's GPU nodes from `sinfo`, asked at most every `NODES_EVERY_S`."""
        now = time.monotonic()
        if self._nodes is None or now - self._nodes[0] >= NODES_EVERY_S:
            argv = commands.sinfo_argv(self.partition)
            listed = [n for n in commands.parse_sinfo(commands.run_command(argv)) if n.gpus]
            self._nodes = (now, listed)
        return self._nodes[1]
