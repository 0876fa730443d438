"""`SlurmExecutor`: hands gpuq's jobs to Slurm with `sbatch` and follows them.

Slurm places and orders the jobs; gpuq's runner is each job's batch step, so the run
directory (on storage the nodes share) works exactly as on a box: `events.jsonl` for
progress, `exit.json` for how the job ended, checkpoints for retries. The runner's files
say when a job started and ended; one `squeue` for all jobs (backing off while nothing
changes) says why waiting jobs wait and how Slurm ended the others.
"""

import logging
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuq.contract import job_files
from gpuq.contract.processes import RUNNER_MODULE
from gpuq.contract.run_records import exit_record
from gpuq.contract.rundir import RunDir, read_json
from gpuq.contract.spec import PRIORITY_MAX, SlurmOptions
from service.executors.base import Exit, Launch, LaunchError, Node, Started, Waiting
from service.executors.prepare import prepare_run
from service.executors.slurm import commands
from service.executors.slurm.commands import SlurmError
from service.executors.slurm.states import Phase, phase, verdict
from service.settings import Settings

log = logging.getLogger(__name__)

#: how soon to ask Slurm again once a runner has written `exit.json`
ENDING_POLL_S = 0.5
#: how long `sinfo`'s answer is kept (every `GET /v1/gpus` and submission reads it)
NODES_EVERY_S = 2.0
#: the batch script, in the attempt's folder
SCRIPT = "slurm.sh"


def nice(priority: int) -> int:
    """Slurm's nice for a gpuq priority: never negative, as only Slurm operators may lower a
    nice value below 0."""
    return PRIORITY_MAX - priority


@dataclass
class _Job:
    """A handed-over attempt, as gpuq last learnt it from Slurm and the run directory."""

    job_id: int
    slurm_id: str
    run: RunDir
    state: str = "PENDING"  #: Slurm's last word; "" once Slurm no longer knows the job
    reason: str = ""
    position: int = 0
    held: bool = False
    priority: int = 0
    after: tuple[str, ...] = ()
    reported_start: bool = False

    @property
    def phase(self) -> Phase:
        return phase(self.state) if self.state else Phase.ended

    def why(self) -> str:
        """Slurm's reason for a waiting job (`None` until its scheduler has looked)."""
        if self.reason in ("", "None"):
            return f"{self.state}, not yet considered by Slurm's scheduler"
        return self.reason

    def ran(self) -> bool:
        """The runner started: its files are the authority, whatever `squeue` said last."""
        return job_files.exists(self.run.path, self.run.runner.name) or job_files.exists(
            self.run.path, self.run.exit.name
        )


class SlurmExecutor:
    name = "slurm"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.runs_dir = settings.runs_dir
        self.python = settings.slurm_python or sys.executable
        self._jobs: dict[int, _Job] = {}
        self._lock = threading.Lock()
        self._interval = settings.slurm_poll_s
        self._next_poll = 0.0
        self._has_sacct: bool | None = None
        self._nodes: tuple[float, list[Node]] | None = None  #: when asked, and the answer
        self._on_exit: Callable[[], None] = lambda: None

    # --- lifecycle ---------------------------------------------------------------------------

    def open(self, on_exit: Callable[[], None]) -> None:
        self._on_exit = on_exit
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
        spec = launch.spec
        asked = spec.slurm or SlurmOptions()
        where = asked.model_copy(
            update={
                "partition": asked.partition or self.settings.slurm_partition,
                "account": asked.account or self.settings.slurm_account,
            }
        )
        argv = commands.sbatch_argv(
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
        )
        try:
            slurm_id = commands.parse_sbatch(commands.run(argv, env))
        except SlurmError as exc:
            raise LaunchError(f"Slurm refused the job: {exc}") from exc
        with self._lock:
            self._jobs[launch.job_id] = _Job(
                launch.job_id,
                slurm_id,
                run,
                held=launch.held,
                priority=launch.priority,
                after=launch.after,
            )
            self._poll_soon(self.settings.slurm_poll_s)
        log.info("job %d: handed to Slurm as job %s", launch.job_id, slurm_id)
        return Started(slurm_id)

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
            job = _Job(job_id, executor_job_id, self.run_dir(job_id, attempt))
            self._jobs[job_id] = job
            self._poll_soon(0.0)
        return not job_files.exists(job.run.path, job.run.exit.name)

    # --- following them --------------------------------------------------------------------

    def waiting(self) -> dict[int, Waiting]:
        self._refresh()
        with self._lock:
            return {
                job.job_id: Waiting(f"Slurm: {job.why()}", job.position or None)
                for job in self._jobs.values()
                if job.phase == Phase.waiting and not job.ran()
            }

    def started(self) -> list[int]:
        self._refresh()
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
        self._refresh()
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
                commands.run(argv)
            except SlurmError as exc:  # it may have started meanwhile
                log.warning("job %d: %s", job_id, exc)
        if updates:
            with self._lock:
                self._poll_soon(0.0)

    def withdraw(self, job_id: int) -> None:
        with self._lock:
            job = self._jobs.pop(job_id, None)
        if job is not None:
            self._scancel(job, [])

    def signal(self, job_id: int, sig: signal.Signals) -> None:
        with self._lock:
            job = self._jobs.get(job_id)
            self._poll_soon(ENDING_POLL_S)
        if job is None:
            return
        if sig == signal.SIGKILL:
            # Every process of the job, then the job itself.
            self._scancel(job, ["--full", "--signal=KILL"])
            self._scancel(job, [])
        else:
            # The runner (the batch step) passes it on to the training process group.
            self._scancel(job, ["--batch", f"--signal={sig.name.removeprefix('SIG')}"])

    def _scancel(self, job: _Job, options: list[str]) -> None:
        try:
            commands.run(["scancel", *options, job.slurm_id])
        except SlurmError as exc:
            log.warning("job %d: %s", job.job_id, exc)

    def job_sessions(self) -> dict[int, int]:
        return {}  # the jobs' processes run on the compute nodes

    def nodes(self) -> list[Node]:
        """The partition's GPU nodes from `sinfo`, asked at most every `NODES_EVERY_S`."""
        now = time.monotonic()
        if self._nodes is None or now - self._nodes[0] >= NODES_EVERY_S:
            argv = commands.sinfo_argv(self.settings.slurm_partition)
            listed = [n for n in commands.parse_sinfo(commands.run(argv)) if n.gpus]
            self._nodes = (now, listed)
        return self._nodes[1]

    # --- asking Slurm ------------------------------------------------------------------------

    def _poll_soon(self, within_s: float) -> None:
        self._interval = self.settings.slurm_poll_s
        self._next_poll = min(self._next_poll, time.monotonic() + within_s)

    def _refresh(self) -> None:
        """One `squeue` for every job, when due: soon after anything happened, then
        backing off (doubling up to `slurm_poll_max_s`) while nothing changes."""
        with self._lock:
            if any(
                job_files.exists(j.run.path, j.run.exit.name)
                for j in self._jobs.values()
                if j.reported_start
            ):
                self._next_poll = min(self._next_poll, time.monotonic() + ENDING_POLL_S)
            if not self._jobs or time.monotonic() < self._next_poll:
                return
            jobs = dict(self._jobs)
        names = sorted({f"gpuq-{job_id}" for job_id in jobs})
        try:
            rows = commands.parse_squeue(commands.run(commands.squeue_argv(names)))
        except SlurmError as exc:
            log.warning("cannot follow gpuq's Slurm jobs: %s", exc)
            self._back_off(changed=False)
            return
        pending = [row for row in rows if phase(row.state) == Phase.waiting]
        positions = {row.slurm_id: n for n, row in enumerate(pending, 1)}  # Slurm's order
        by_id = {row.slurm_id: (positions.get(row.slurm_id, 0), row) for row in rows}
        forgotten = [job.slurm_id for job in jobs.values() if job.slurm_id not in by_id]
        final = self._accounted(forgotten) if forgotten else {}
        changed = False
        with self._lock:
            for job in jobs.values():
                before = (job.state, job.reason)
                if job.slurm_id in by_id:
                    job.position, row = by_id[job.slurm_id]
                    job.state, job.reason = row.state, row.reason
                else:
                    job.state, job.reason = final.get(job.slurm_id, ""), ""
                changed |= (job.state, job.reason) != before
            self._back_off(changed)
        if changed and any(job.phase == Phase.ended for job in jobs.values()):
            self._on_exit()

    def _back_off(self, changed: bool) -> None:
        settings = self.settings
        if changed:
            self._interval = settings.slurm_poll_s
        else:
            self._interval = min(self._interval * 2, settings.slurm_poll_max_s)
        self._next_poll = time.monotonic() + self._interval

    def _accounted(self, slurm_ids: list[str]) -> dict[str, str]:
        """Final states of jobs the controller no longer holds, from `sacct` when the
        cluster keeps accounting; {} when it does not (then `exit.json` alone decides)."""
        if self._has_sacct is False:
            return {}
        try:
            states = commands.parse_sacct(commands.run(commands.sacct_argv(slurm_ids)))
        except SlurmError as exc:
            if self._has_sacct is None:
                log.info("no Slurm accounting (%s): exit.json alone says how jobs ended", exc)
            self._has_sacct = False
            return {}
        self._has_sacct = True
        return states


def slurm_environment_ok() -> str | None:
    """None if Slurm's commands answer here; otherwise why not."""
    try:
        commands.run(["sinfo", "--version"])
    except SlurmError as exc:
        return str(exc)
    return None


def describe_filesystem(path: Path) -> str:
    """The filesystem under `path`, from /proc/mounts (for the start-up warning)."""
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                fields = line.split()
                if (
                    len(fields) >= 3
                    and str(path).startswith(fields[1])
                    and len(fields[1]) > len(best)
                ):
                    best, kind = fields[1], fields[2]
    except OSError:
        pass
    return f"{kind} mounted at {best or '?'}"
