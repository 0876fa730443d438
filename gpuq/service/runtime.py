"""Everything `gpuq serve` holds open (database, GPUs, scheduler), and the one call each
route makes: `Service` is the domain's front door, so routes never reach into the
scheduler or compute run-directory paths."""

from dataclasses import asdict, dataclass
from pathlib import Path

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import TERMINAL
from gpuq.service import admission, jobs, migrate
from gpuq.service.artifacts import Artifact, find_artifact, list_artifacts
from gpuq.service.db import Database
from gpuq.service.errors import Conflict, Invalid, NotFound, Unavailable
from gpuq.service.executors import Executor, LocalExecutor, Node, QueueingExecutor
from gpuq.service.executors.slurm import SlurmExecutor, slurm_environment_ok
from gpuq.service.gpus import registry
from gpuq.service.gpus.inventory import Inventory, InventoryError, discover
from gpuq.service.gpus.nvml import GpuProbe
from gpuq.service.gpus.registry import GpuRegistry
from gpuq.service.public import GpuNodePublic, GpuPublic, Preview
from gpuq.service.scheduler.loop import Scheduler
from gpuq.service.settings import Settings
from gpuq.service.tables import Job
from gpuq.service.users import Caller


@dataclass
class Service:
    settings: Settings
    db: Database
    gpus: GpuRegistry
    executor: Executor
    scheduler: Scheduler
    schedules: bool = True  #: False in an API-only process

    @classmethod
    def open(
        cls, settings: Settings, *, schedule: bool = True, probe: GpuProbe | None = None
    ) -> "Service":
        """Migrates the database, discovers GPUs and starts the scheduler; raises on trouble.

        `schedule=False` serves the API only: jobs are stored and stay queued. `probe`
        replaces NVML with a stand-in (tests): its readings drive placement, sampling and
        draining while workers train on simulated devices.
        """
        settings.home.mkdir(parents=True, exist_ok=True)
        executor = open_executor(settings)
        if isinstance(executor, QueueingExecutor):
            # The cluster's GPUs are Slurm's; `sim:` still makes workers simulate theirs.
            inventory = Inventory([], simulated=settings.gpus.startswith("sim"), probe=None)
        elif probe is None:
            inventory = discover(settings.gpus)
        else:
            inventory = Inventory.from_probe(probe, simulated=True)
        db = Database.open(settings.db_url)
        migrate.upgrade(db)
        registry.sync(db, inventory)
        gpus = GpuRegistry(db, inventory)
        scheduler = Scheduler(db, settings, gpus, executor)
        if schedule:
            scheduler.start()
        return cls(settings, db, gpus, executor, scheduler, schedules=schedule)

    def close(self) -> None:
        if self.schedules:
            self.scheduler.stop()
        self.db.dispose()

    # --- jobs ----------------------------------------------------------------------------------

    def submit(
        self, spec: JobSpec, caller: Caller, idempotency_key: str | None = None
    ) -> tuple[Job, bool]:
        """Admits `spec` (422 if it can never run here), applies the caller's quotas, stores
        the job with its audit entry and wakes the scheduler; `created` is False for a
        replayed `idempotency_key` (the original job)."""
        self._admit(spec)
        settings = self.settings
        limits = jobs.Limits(settings.max_jobs_queued, settings.max_user_priority)
        job, created = jobs.create_job(
            self.db, spec=spec, caller=caller, idempotency_key=idempotency_key, limits=limits
        )
        if created:
            self.scheduler.wake()
        return job, created

    def preview(self, spec: JobSpec, caller: Caller) -> Preview:
        """A dry run: where `spec` would start now, or why it would wait."""
        self._admit(spec)
        return self.scheduler.preview(spec, caller.name)

    def _admit(self, spec: JobSpec) -> None:
        devices = self.gpus.inventory.devices
        cluster = None
        if isinstance(self.executor, QueueingExecutor):
            cluster = [node.gpus for node in self._nodes()]
        admission.check(spec, devices, self.settings.gpu_headroom_mb, cluster=cluster)

    def _nodes(self) -> list[Node]:
        assert isinstance(self.executor, QueueingExecutor)
        try:
            return self.executor.nodes()
        except OSError as exc:
            raise Unavailable(f"cannot ask Slurm for its nodes: {exc}") from exc

    def cancel(self, job_id: int, caller: Caller) -> Job:
        job = jobs.cancel_job(self.db, job_id, caller)
        self.scheduler.wake()
        return job

    def hold(self, job_id: int, caller: Caller, *, held: bool) -> Job:
        job = jobs.set_held(self.db, job_id, caller, held=held)
        if not held:
            self.scheduler.wake()
        return job

    def change_priority(self, job_id: int, caller: Caller, priority: int | None) -> Job:
        if priority is None:
            return jobs.get_job(self.db, job_id)
        job = jobs.set_priority(self.db, job_id, caller, priority)
        self.scheduler.wake()
        return job

    def log_path(self, job_id: int) -> Path | None:
        """The latest attempt's log; None while the job was never launched (404: no job)."""
        attempt = jobs.get_job(self.db, job_id).attempt
        return self.executor.run_dir(job_id, attempt).log if attempt else None

    def ended(self, job_id: int) -> bool:
        return jobs.get_job(self.db, job_id).status in TERMINAL

    def artifacts(self, job_id: int, attempt: int | None) -> tuple[int, list[Artifact]]:
        """The attempt asked for (default: the latest; 0 if never launched) and its files."""
        chosen = self._attempt(job_id, attempt)
        return chosen, list_artifacts(self.executor.run_dir(job_id, chosen)) if chosen else []

    def artifact(self, job_id: int, name: str, attempt: int | None) -> Artifact:
        """One file of an attempt; 404 if there is none by that name."""
        chosen = self._attempt(job_id, attempt)
        if not chosen:
            raise NotFound(f"job {job_id} has not started, so it has no files yet")
        return find_artifact(self.executor.run_dir(job_id, chosen), name)

    def _attempt(self, job_id: int, attempt: int | None) -> int:
        job = jobs.get_job(self.db, job_id)
        if attempt is not None and attempt > job.attempt:
            raise Invalid(("query", "attempt"), f"job {job_id} has had {job.attempt} attempt(s)")
        return attempt or job.attempt

    # --- GPUs ----------------------------------------------------------------------------------

    def list_gpus(self) -> list[GpuPublic] | list[GpuNodePublic]:
        if isinstance(self.executor, QueueingExecutor):
            return [GpuNodePublic(**asdict(node)) for node in self._nodes()]
        return self.gpus.describe(self.scheduler.job_groups())

    def release_gpu(self, index: int, caller: Caller) -> GpuPublic:
        """Puts a draining or quarantined GPU back into use; 404 or 409 otherwise."""
        if isinstance(self.executor, QueueingExecutor):
            raise Conflict("the GPUs are Slurm's: a cluster administrator resumes a node")
        views = {g.index: g for g in self.gpus.describe(self.scheduler.job_groups())}
        if index not in views:
            raise NotFound(f"no GPU with index {index}")
        if not self.gpus.release(index, actor=caller.name):
            raise Conflict(f"GPU {index} is {views[index].state}, not draining or quarantined")
        self.scheduler.wake()
        return {g.index: g for g in self.gpus.describe(self.scheduler.job_groups())}[index]


def open_executor(settings: Settings) -> Executor:
    """The executor `GPUQ_EXECUTOR` names; `InventoryError` if Slurm is asked for but its
    commands do not answer here."""
    if settings.executor == "slurm":
        problem = slurm_environment_ok()
        if problem is not None:
            raise InventoryError(
                f"GPUQ_EXECUTOR=slurm, but Slurm's commands do not work here ({problem}); "
                "install Slurm's client and set SLURM_CONF if needed"
            )
        return SlurmExecutor(settings)
    return LocalExecutor(settings.runs_dir)
