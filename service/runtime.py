"""Everything `gpuq serve` holds open (database, GPUs, scheduler), and the one call each
route makes: `Service` is the domain's front door, so routes never reach into the
scheduler or compute run-directory paths."""

import secrets
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import BinaryIO

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import TERMINAL
from gpuq.contract.sweep import SweepSpec
from service import jobs
from service.errors import Conflict, Forbidden, Invalid, NotFound, Unavailable
from service.executors import Executor, LocalExecutor, Node, QueueingExecutor
from service.executors.slurm import SlurmExecutor, slurm_environment_ok
from service.gpus import maintenance, registry
from service.gpus.inventory import Inventory, InventoryError, discover
from service.gpus.nvml import GpuProbe
from service.gpus.registry import GpuRegistry
from service.jobs import admission
from service.jobs.artifacts import Artifact, find_artifact, list_artifacts, open_artifact
from service.jobs.submissions import Submissions
from service.jobs.submit import Stored, Submission, submission
from service.public import DrainPublic, GpuNodePublic, GpuPublic, Preview
from service.scheduler.loop import Scheduler
from service.scheduler.remote import SchedulerFailed, SchedulerProcess
from service.settings import Settings
from service.store import migrate
from service.store.db import Database
from service.store.tables import Job, Sweep
from service.sweeps import actions as sweep_actions
from service.sweeps.expand import expand
from service.sweeps.submit import create_sweep
from service.team import run_as, state_dirs, users
from service.team.users import Caller
from service.webhooks import Notifier
from service.webhooks.addresses import AllowList, check_url

#: why `gpuq shell` cannot run on a cluster, and what to use there
SESSIONS_ON_SLURM = (
    "interactive sessions run on a gpuq box, not through Slurm: on this cluster use "
    "`salloc --gpus=N` (then `srun --pty bash`)"
)


@dataclass
class Service:
    settings: Settings
    db: Database
    gpus: GpuRegistry
    executor: Executor
    #: in this process, or (gpuq serve) in one of its own
    scheduler: Scheduler | SchedulerProcess
    schedules: bool = True  #: False in an API-only process
    notifier: Notifier | None = None  #: sends webhooks, where jobs are scheduled
    #: Stores submissions, concurrent ones in shared commits (group commit).
    submissions: Submissions = field(init=False)
    #: the executor has a queue of its own (Slurm): asked once, since a check against the
    #: runtime Protocol inspects each of the executor's methods every time (every submission
    #: asks)
    _queueing: bool = field(init=False)

    def __post_init__(self) -> None:
        self.submissions = Submissions(self.db, on_stored=self.scheduler.wake)
        self._queueing = isinstance(self.executor, QueueingExecutor)

    @classmethod
    def open(
        cls,
        settings: Settings,
        *,
        schedule: bool = True,
        scheduler_process: bool = False,
        probe: GpuProbe | None = None,
    ) -> "Service":
        """Migrates the database, discovers GPUs and starts the scheduler; raises on trouble.

        `schedule=False` serves the API only: jobs are stored and stay queued.
        `scheduler_process`: the scheduler runs in a process of its own (`gpuq serve`'s
        way: `SchedulerFailed` if it cannot start), not in a thread of this one. `probe`
        replaces NVML with a stand-in (tests): its readings drive placement, sampling and
        draining while workers train on simulated devices.
        """
        run_as.check_startup(settings)
        state_dirs.prepare(settings)
        executor = open_executor(settings)
        if isinstance(executor, QueueingExecutor):
            # The cluster's GPUs are Slurm's; `sim:` still makes workers simulate theirs.
            inventory = Inventory([], simulated=settings.gpus.startswith("sim"), probe=None)
        elif probe is None:
            inventory = discover(settings.gpus)
        else:
            inventory = Inventory.from_probe(probe, simulated=True)
        db = Database.open(settings.db_url, api_only=not schedule)
        migrate.upgrade(db)
        try:
            run_as.check_members(settings, db)
        except run_as.RunAsError:
            db.dispose()
            raise
        state_dirs.protect_database(settings)
        registry.sync(db, inventory)
        gpus = GpuRegistry(db, inventory)
        planner = Scheduler(db, settings, gpus, executor)
        scheduler: Scheduler | SchedulerProcess = planner
        notifier = None
        if schedule and scheduler_process:
            scheduler = SchedulerProcess(db, planner)
            try:
                scheduler.start(settings)
            except SchedulerFailed:
                db.dispose()
                raise
        elif schedule:
            planner.start()
            notifier = Notifier(db, settings)
            notifier.start()
            db.wake_on_api_commits(planner.wake)  # what --api-only processes store starts now
        return cls(settings, db, gpus, executor, scheduler, schedules=schedule, notifier=notifier)

    def close(self) -> None:
        self.submissions.close()  # first: what is waiting is stored and answered
        if self.notifier is not None:
            self.notifier.stop()
        if self.schedules:
            self.scheduler.stop()
        self.db.dispose()

    # --- jobs ----------------------------------------------------------------------------------

    def submit(self, spec: JobSpec, caller: Caller, idempotency_key: str | None = None) -> Stored:
        """Admits `spec` (422 if it can never run here), applies the caller's quotas, stores
        the job with its audit entry and wakes the scheduler; returns once the job is
        committed. `created` is False for a replayed `idempotency_key` (the original job)."""
        return self.submissions.submit(*self._submission(spec, caller, idempotency_key))

    async def submit_async(
        self, spec: JobSpec, caller: Caller, idempotency_key: str | None = None
    ) -> Stored:
        """`submit` on an event loop: the checks, which may read files, and the commit run
        in the submissions' thread while the loop goes on."""
        return await self.submissions.submit_async(*self._submission(spec, caller, idempotency_key))

    def _submission(
        self, spec: JobSpec, caller: Caller, idempotency_key: str | None
    ) -> tuple[Submission, Callable[[], None]]:
        """What `caller` submits, and its checks (`_admit`)."""
        settings = self.settings
        limits = jobs.Limits(settings.max_jobs_queued, settings.max_user_priority)
        item = submission(spec, caller, idempotency_key, limits)
        return item, partial(self._admit, spec, caller)

    def submit_sweep(
        self, spec: SweepSpec, caller: Caller, idempotency_key: str | None = None
    ) -> tuple[Sweep, bool]:
        """Expands `spec` into its members (422 for too many, or a parameter the spec cannot
        take), admits each as a job, and stores the sweep with all of them at once; False for
        a replayed `idempotency_key` (the original sweep)."""
        settings = self.settings
        expansion = expand(spec, limit=settings.max_sweep_jobs, seed=secrets.randbelow(2**31))
        for member in expansion.members:  # a parameter may change what admission checks
            self._admit(member.spec, caller)
        limits = jobs.Limits(settings.max_jobs_queued, settings.max_user_priority)
        stored = create_sweep(
            self.db, spec, expansion, caller, idempotency_key=idempotency_key, limits=limits
        )
        self.scheduler.wake()
        return stored

    def cancel_sweep(self, sweep_id: int, caller: Caller) -> Sweep:
        sweep = sweep_actions.cancel_sweep(self.db, sweep_id, caller)
        self.scheduler.wake()
        return sweep

    def hold_sweep(self, sweep_id: int, caller: Caller, *, held: bool) -> Sweep:
        sweep = sweep_actions.hold_sweep(self.db, sweep_id, caller, held=held)
        self.scheduler.wake()
        return sweep

    def preview(self, spec: JobSpec, caller: Caller) -> Preview:
        """A dry run: where `spec` would start now, or why it would wait."""
        self._admit(spec, caller)
        return self.scheduler.preview(spec, caller.name)

    def _admit(self, spec: JobSpec, caller: Caller) -> None:
        """Refuses what could never run here, or not as `caller`: their Unix account, the
        paths they name, command jobs as root, a webhook naming an internal address."""
        settings = self.settings
        run_as.check_spec(settings, spec)
        run_as.check_shared(settings, self.db)
        account = run_as.account_for(settings, caller)
        rules = run_as.path_rules(settings, account, has_users=users.has_users(self.db))
        devices = self.gpus.inventory.devices
        cluster = None
        if self._queueing:
            if spec.kind == "session":
                raise Invalid(("body", "kind"), SESSIONS_ON_SLURM)
            cluster = [node.gpus for node in self._nodes()]
        admission.check(spec, devices, settings.gpu_headroom_mb, cluster=cluster, rules=rules)
        if spec.webhook is not None:
            allow = AllowList.parse(settings.webhook_allow)
            check_url(spec.webhook, allow, ("body", "webhook"))

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

    def log_path(self, job_id: int, caller: Caller) -> Path | None:
        """The latest attempt's log; None while the job was never launched (404: no job)."""
        attempt = self._files_of(job_id, caller).attempt
        return self.executor.run_dir(job_id, attempt).log if attempt else None

    def _files_of(self, job_id: int, caller: Caller) -> Job:
        """The job, if `caller` may read its files: under GPUQ_RUN_AS=owner they are its
        owner's alone (and admins'), as on disk; elsewhere the team's."""
        job = jobs.get_job(self.db, job_id)
        if self.settings.run_as == "owner" and not caller.manages(job.owner):
            raise Forbidden(f"job {job_id}'s files are {job.owner}'s (GPUQ_RUN_AS=owner)")
        return job

    def ended(self, job_id: int) -> bool:
        return jobs.get_job(self.db, job_id).status in TERMINAL

    def artifacts(
        self, job_id: int, attempt: int | None, caller: Caller
    ) -> tuple[int, list[Artifact]]:
        """The attempt asked for (default: the latest; 0 if never launched) and its files."""
        chosen = self._attempt(job_id, attempt, caller)
        return chosen, list_artifacts(self.executor.run_dir(job_id, chosen)) if chosen else []

    def artifact(
        self, job_id: int, name: str, attempt: int | None, caller: Caller
    ) -> tuple[Artifact, BinaryIO]:
        """One file of an attempt, opened; 404 if there is none by that name."""
        chosen = self._attempt(job_id, attempt, caller)
        if not chosen:
            raise NotFound(f"job {job_id} has not started, so it has no files yet")
        run = self.executor.run_dir(job_id, chosen)
        found = find_artifact(run, name)
        return found, open_artifact(found, run)

    def _attempt(self, job_id: int, attempt: int | None, caller: Caller) -> int:
        job = self._files_of(job_id, caller)
        if attempt is not None and attempt > job.attempt:
            raise Invalid(("query", "attempt"), f"job {job_id} has had {job.attempt} attempt(s)")
        return attempt or job.attempt

    # --- GPUs ----------------------------------------------------------------------------------

    def list_gpus(self) -> list[GpuPublic] | list[GpuNodePublic]:
        if self._queueing:
            return [GpuNodePublic(**asdict(node)) for node in self._nodes()]
        return self.gpus.describe(self.scheduler.job_sessions())

    def release_gpu(self, index: int, caller: Caller) -> GpuPublic:
        """Puts a draining or quarantined GPU back into use; 404 or 409 otherwise."""
        if self._queueing:
            raise Conflict("the GPUs are Slurm's: a cluster administrator resumes a node")
        views = {g.index: g for g in self.gpus.describe(self.scheduler.job_sessions())}
        if index not in views:
            raise NotFound(f"no GPU with index {index}")
        if not self.gpus.release(index, actor=caller.name):
            raise Conflict(f"GPU {index} is {views[index].state}, not draining or quarantined")
        self.scheduler.wake()
        return {g.index: g for g in self.gpus.describe(self.scheduler.job_sessions())}[index]

    # --- maintenance ---------------------------------------------------------------------------

    def drains(self) -> list[DrainPublic]:
        """Every maintenance drain: the whole box's first, then single GPUs'."""
        return maintenance.current(self.db)

    def drain(
        self, gpus: list[int] | None, reason: str | None, caller: Caller
    ) -> list[DrainPublic]:
        """Starts nothing new on `gpus` (None: the whole box) until resumed; running jobs go
        on. 404 for an unknown GPU; 409 for single GPUs under Slurm."""
        self._slurm_has_no_gpus(gpus)
        drains = maintenance.drain(self.db, gpus, reason, caller.name)
        self.scheduler.wake()
        return drains

    def resume(self, gpus: list[int] | None, caller: Caller) -> list[DrainPublic]:
        """Ends the drains of `gpus` (None: all of them) and returns those left."""
        self._slurm_has_no_gpus(gpus)
        drains = maintenance.resume(self.db, gpus, caller.name)
        self.scheduler.wake()
        return drains

    def _slurm_has_no_gpus(self, gpus: list[int] | None) -> None:
        if gpus is not None and self._queueing:
            raise Conflict(
                "the GPUs are Slurm's: drain a node with `scontrol update nodename=... "
                "state=drain reason=...`, or drain the whole box (no GPUs) to stop handing "
                "jobs over"
            )


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
    socket = settings.socket_path.absolute() if settings.socket_path else None
    return LocalExecutor(settings.runs_dir, settings.warm_workers, socket=socket)
