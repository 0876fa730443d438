"""`SlurmExecutor`: hands gpuq's jobs to Slurm with `sbatch` and follows them.

Slurm places and orders the jobs; gpuq's runner is each job's batch step, so the run
directory (on storage the nodes share) works exactly as on a box: `events.jsonl` for
progress, `exit.json` for how the job ended, checkpoints for retries. The runner's files
say when a job started and ended; one `squeue` for all jobs (backing off while nothing
changes) says why waiting jobs wait and how Slurm ended the others (`queue_view`). The
cluster's nodes are `SlurmNodes`' to list.
"""

import logging
import shlex
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from gpuq.contract import job_files
from gpuq.contract.processes import RUNNER_MODULE
from gpuq.contract.run_records import exit_record
from gpuq.contract.rundir import RunDir, read_json
from gpuq.contract.slurm_options import SlurmOptions
from gpuq.contract.spec import PRIORITY_MAX
from service.executors.base import (
    Exit,
    Launch,
    LaunchError,
    Node,
    QueueingExecutor,
    Standby,
    Started,
    Waiting,
)
from service.executors.prepare import prepare_run
from service.executors.slurm import commands
from service.executors.slurm.commands import SlurmError
from service.executors.slurm.environment import describe_filesystem
from service.executors.slurm.nodes import SlurmNodes
from service.executors.slurm.queue_view import ENDING_POLL_S, HandedJob, QueueView
from service.executors.slurm.states import Phase, verdict
from service.settings import Settings

log = logging.getLogger(__name__)

#: the batch script, in the attempt's folder
SCRIPT = "slurm.sh"


def nice(priority: int) -> int:
    """Slurm's nice for a gpuq priority: never negative, as only Slurm operators may lower a
    nice value below 0."""
    return PRIORITY_MAX - priority


class SlurmExecutor:
    name = "slurm"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.runs_dir = settings.runs_dir
        self.python = settings.slurm_python or sys.executable
        self._queue = QueueView(settings)
        # Shared with the queue's view, which brings them up to date.
        self._jobs, self._lock = self._queue.jobs, self._queue.lock
        self._cluster = SlurmNodes(settings)

    # --- lifecycle ---------------------------------------------------------------------------

    def open(self, on_exit: Callable[[], None]) -> None:
        self._queue.on_exit = on_exit
        log.warning(
            "Slurm executor: run directories are under %s (%s), which every compute node "
            "must mount at the same path (shared storage); gpuq's runner on the nodes is %s",
            self.runs_dir,
            describe_filesystem(self.runs_dir),
            self.python,
        )

    def close(self) -> None:
        pass  # Slurm keeps running the jobs; a restarted gpuq takes them back

    def run_dir(self, job_id: int, attempt: int) -> RunDir:
        return RunDir.of(self.runs_dir, job_id, attempt)

    # --- handing jobs over -----------------------------------------------------------------

    def start(self, launch: Launch) -> Started:
        try:
            # Written before the folder is the owner's: root writes nothing in it after.
            script = self.run_dir(launch.job_id, launch.attempt).path / SCRIPT
            run, env = prepare_run(self.runs_dir, launch, {SCRIPT: self._script(script.parent)})
        except OSError as exc:
            raise LaunchError(f"could not write the run directory: {exc}") from exc
        # Slurm sets CUDA_VISIBLE_DEVICES to the GPUs it gives the job.
        env.pop("CUDA_VISIBLE_DEVICES", None)
        argv = self._sbatch_argv(launch, script, run)
        try:
            slurm_id = commands.parse_sbatch(commands.run_command(argv, env))
        except SlurmError as exc:
            raise LaunchError(f"Slurm refused the job: {exc}") from exc
        with self._lock:
            self._jobs[launch.job_id] = HandedJob(
                launch.job_id,
                slurm_id,
                run,
                held=launch.held,
                priority=launch.priority,
                after=launch.after,
            )
            self._queue.poll_soon(self.settings.slurm_poll_s)
        log.info("job %d: handed to Slurm as job %s", launch.job_id, slurm_id)
        return Started(slurm_id)

    def _sbatch_argv(self, launch: Launch, script: Path, run: RunDir) -> list[str]:
        """`sbatch` for `launch`: the spec's Slurm options over the site's defaults."""
        spec = launch.spec
        asked = spec.slurm or SlurmOptions()
        where = asked.model_copy(
            update={
                "partition": asked.partition or self.settings.slurm_partition,
                "account": asked.account or self.settings.slurm_account,
            }
        )
        return commands.sbatch_argv(
            job_id=launch.job_id,
            script=str(script),
            output=str(run.log),
            workdir=str(run.path),
            spec=spec,
            where=where,
            grace_s=self.settings.cancel_grace_s,
            priority_nice=nice(launch.priority),
            held=launch.held,
            after=launch.after,
            extra=self.settings.slurm_sbatch_args,
            run_as=launch.run_as,
            cpus=launch.cpus,
            host_memory_mb=launch.host_memory_mb,
            reservation=launch.slurm_reservation,
        )

    def _script(self, run_dir: Path) -> str:
        """The batch script: gpuq's runner, as on a box. (sbatch reads it as it submits,
        so it need not be executable.)"""
        return (
            "#!/bin/sh\n"
            "# gpuq's runner is the batch step: it starts the job and writes exit.json.\n"
            f"exec {shlex.quote(self.python)} -P -m {RUNNER_MODULE} "
            f"{shlex.quote(str(run_dir))}\n"
        )

    def adopt(
        self, job_id: int, attempt: int, executor_job_id: str | None, *, session: bool = True
    ) -> bool:
        if not executor_job_id:
            return False
        with self._lock:
            # Waiting until `squeue` or its runner's files say otherwise (at once: the next
            # call polls).
            job = HandedJob(job_id, executor_job_id, self.run_dir(job_id, attempt))
            self._jobs[job_id] = job
            self._queue.poll_soon(0.0)
        return not job_files.exists(job.run.path, job.run.exit.name)

    # --- following them --------------------------------------------------------------------

    def waiting(self) -> dict[int, Waiting]:
        self._queue.refresh()
        with self._lock:
            return {
                job.job_id: Waiting(f"Slurm: {job.why()}", job.position or None)
                for job in self._jobs.values()
                if job.phase == Phase.waiting and not job.ran()
            }

    def started(self) -> list[int]:
        self._queue.refresh()
        with self._lock:
            began = [
                job
                for job in self._jobs.values()
                if not job.reported_start and (job.phase == Phase.running or job.ran())
            ]
            for job in began:
                job.reported_start = True
        return [job.job_id for job in began]

    def exited(self) -> list[Exit]:
        self._queue.refresh()
        with self._lock:
            # One that ran is reported started (`started`, the next step's `follow`) before
            # its end: it can start and end between this step's looks, and gpuq cannot end
            # a job it still has queued.
            ended = [
                job
                for job in self._jobs.values()
                if job.phase == Phase.ended and (job.reported_start or not job.ran())
            ]
            for job in ended:
                del self._jobs[job.job_id]
        exits = []
        for job in ended:
            record = read_json(job.run.exit)
            judged = verdict(
                job.state or None,
                has_exit_record=exit_record(record) is not None,  # one that fits the contract
                slurm_id=job.slurm_id,
            )
            exits.append(Exit(job.job_id, record, judged))
        return exits

    def follow(self, job_id: int, *, held: bool, priority: int, after: tuple[str, ...]) -> None:
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None or job.phase != Phase.waiting:
            return
        slurm_id = job.slurm_id
        updates = []
        if job.held and not held:
            updates.append(["scontrol", "release", slurm_id])
        # A held job's new nice value waits for its release: in Slurm a new nice value
        # gives a held job a priority again, which would let it start.
        if priority != job.priority and not held:
            updates.append(["scontrol", "update", f"JobId={slurm_id}", f"Nice={nice(priority)}"])
            job.priority = priority
        if after and after != job.after:
            dependency = "afterok:" + ":".join(after)
            updates.append(["scontrol", "update", f"JobId={slurm_id}", f"Dependency={dependency}"])
            job.after = after
        if held and not job.held:
            updates.append(["scontrol", "hold", slurm_id])
        job.held = held
        for argv in updates:
            try:
                commands.run_command(argv)
            except SlurmError as exc:  # it may have started meanwhile
                log.warning("job %d: %s", job_id, exc)
        if updates:
            with self._lock:
                self._queue.poll_soon(0.0)

    def withdraw(self, job_id: int) -> None:
        with self._lock:
            job = self._jobs.pop(job_id, None)
        if job is not None:
            self._scancel(job, [])

    def signal(self, job_id: int, sig: signal.Signals) -> None:
        with self._lock:
            job = self._jobs.get(job_id)
            self._queue.poll_soon(ENDING_POLL_S)
        if job is None:
            return
        if sig == signal.SIGKILL:
            # Every process of the job, then the job itself.
            self._scancel(job, ["--full", "--signal=KILL"])
            self._scancel(job, [])
        else:
            # The runner (the batch step) passes it on to the training process group.
            self._scancel(job, ["--batch", f"--signal={sig.name.removeprefix('SIG')}"])

    def _scancel(self, job: HandedJob, options: list[str]) -> None:
        try:
            commands.run_command(["scancel", *options, job.slurm_id])
        except SlurmError as exc:
            log.warning("job %d: %s", job.job_id, exc)

    def job_sessions(self) -> dict[int, int]:
        return {}  # the jobs' processes run on the compute nodes

    def own_queue(self) -> QueueingExecutor:
        return self  # Slurm places and orders; gpuq hands it the queue

    def standbys(self) -> list[Standby]:
        return []  # the nodes keep no warm pool

    def nodes(self) -> list[Node]:
        """The partition's GPU nodes from `sinfo` (`SlurmNodes`, which caches them)."""
        return self._cluster.nodes()
