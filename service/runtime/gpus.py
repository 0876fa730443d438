"""What the API does with GPUs: list them (or, under Slurm, the cluster's nodes), put one
back into use, and an admin's maintenance drains."""

from collections.abc import Callable
from dataclasses import asdict

from service.errors import Conflict, NotFound
from service.executors import Cluster
from service.gpus import maintenance
from service.gpus.registry import GpuRegistry
from service.host import HostSize
from service.public import DrainPublic, GpuNodePublic, GpuPublic, HostPublic
from service.runtime.checks import nodes_of
from service.runtime.host_view import describe_host
from service.scheduler.dry_runs import DryRuns
from service.store.db import Database
from service.team.users import Caller


class Gpus:
    def __init__(
        self,
        db: Database,
        registry: GpuRegistry,
        cluster: Cluster | None,
        dry_runs: DryRuns,
        wake: Callable[[], None],
        size: HostSize,
    ) -> None:
        self.db = db
        self.size = size  #: the box's cores and host memory, less gpuq's reserve
        self.registry = registry
        self.cluster = cluster  #: the nodes of an executor with a queue of its own
        self.dry_runs = dry_runs  #: what runs, as the database says
        self.wake = wake

    def describe(self) -> list[GpuPublic] | list[GpuNodePublic]:
        if self.cluster is not None:
            return [GpuNodePublic(**asdict(node)) for node in nodes_of(self.cluster)]
        return self._described()

    def host(self) -> HostPublic:
        """The box's cores and host memory, and what each running job holds."""
        return describe_host(self.db, self.size, on_a_cluster=self.cluster is not None)

    def release(self, index: int, caller: Caller) -> GpuPublic:
        """Puts a draining or quarantined GPU back into use; 404 or 409 otherwise."""
        if self.cluster is not None:
            raise Conflict("the GPUs are Slurm's: a cluster administrator resumes a node")
        views = {g.index: g for g in self._described()}
        if index not in views:
            raise NotFound(f"no GPU with index {index}")
        if not self.registry.release(index, actor=caller.name):
            raise Conflict(f"GPU {index} is {views[index].state}, not draining or quarantined")
        self.wake()
        return {g.index: g for g in self._described()}[index]

    def _described(self) -> list[GpuPublic]:
        return self.registry.describe(self.dry_runs.job_sessions())

    # --- maintenance -----------------------------------------------------------------------

    def drains(self) -> list[DrainPublic]:
        """Every maintenance drain: the whole box's first, then single GPUs'."""
        return maintenance.current(self.db)

    def drain(
        self, gpus: list[int] | None, reason: str | None, caller: Caller
    ) -> list[DrainPublic]:
        """Starts nothing new on `gpus` (None: the whole box) until resumed; running jobs go
        on. 404 for an unknown GPU; 409 for single GPUs under Slurm."""
        self._slurm_has_no_gpus(gpus)
        drains = maintenance.admin_drain(self.db, gpus, reason, caller.name)
        self.wake()
        return drains

    def resume(self, gpus: list[int] | None, caller: Caller) -> list[DrainPublic]:
        """Ends the drains of `gpus` (None: all of them) and returns those left."""
        self._slurm_has_no_gpus(gpus)
        drains = maintenance.admin_resume(self.db, gpus, caller.name)
        self.wake()
        return drains

    def _slurm_has_no_gpus(self, gpus: list[int] | None) -> None:
        if gpus is not None and self.cluster is not None:
            raise Conflict(
                "the GPUs are Slurm's: drain a node with `scontrol update nodename=... "
                "state=drain reason=...`, or drain the whole box (no GPUs) to stop handing "
                "jobs over"
            )
