"""gpuq's jobs in Slurm's queue, as gpuq last saw them: one `squeue` for all of them when
due (soon after anything happened, then backing off while nothing changes), `sacct` for
the final state of those the controller has forgotten, and each job's run directory,
whose runner files outrank what `squeue` said last."""

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpuq.contract import job_files
from gpuq.contract.rundir import RunDir
from service.executors.slurm import commands
from service.executors.slurm.commands import QueueRow, SlurmError
from service.executors.slurm.states import Phase, phase
from service.settings import Settings

log = logging.getLogger(__name__)

#: how soon to ask Slurm again once a runner has written `exit.json`
ENDING_POLL_S = 0.5


@dataclass
class HandedJob:
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


class QueueView:
    """The handed-over jobs (`jobs`, guarded by `lock`) and when to ask Slurm of them next;
    `on_exit` is called when a look finds one that ended."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.jobs: dict[int, HandedJob] = {}
        self.lock = threading.Lock()
        self.on_exit: Callable[[], None] = lambda: None
        self._interval = settings.slurm_poll_s
        self._next_poll = 0.0
        self._has_sacct: bool | None = None

    def poll_soon(self, within_s: float) -> None:
        """Asks Slurm again within `within_s` (the caller holds `lock`)."""
        self._interval = self.settings.slurm_poll_s
        self._next_poll = min(self._next_poll, time.monotonic() + within_s)

    def refresh(self) -> None:
        """One `squeue` for every job, when due: soon after anything happened, then
        backing off (doubling up to `slurm_poll_max_s`) while nothing changes."""
        with self.lock:
            if any(
                job_files.exists(j.run.path, j.run.exit.name)
                for j in self.jobs.values()
                if j.reported_start
            ):
                self._next_poll = min(self._next_poll, time.monotonic() + ENDING_POLL_S)
            if not self.jobs or time.monotonic() < self._next_poll:
                return
            jobs = dict(self.jobs)
        names = sorted({f"gpuq-{job_id}" for job_id in jobs})
        try:
            rows = commands.parse_squeue(commands.run_command(commands.squeue_argv(names)))
        except SlurmError as exc:
            log.warning("cannot follow gpuq's Slurm jobs: %s", exc)
            self._back_off(changed=False)
            return
        by_id = _by_id(rows)
        forgotten = [job.slurm_id for job in jobs.values() if job.slurm_id not in by_id]
        final = self._accounted(forgotten) if forgotten else {}
        with self.lock:
            changed = _apply_squeue(jobs, by_id, final)
            self._back_off(changed)
        if changed and any(job.phase == Phase.ended for job in jobs.values()):
            self.on_exit()

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
            states = commands.parse_sacct(commands.run_command(commands.sacct_argv(slurm_ids)))
        except SlurmError as exc:
            if self._has_sacct is None:
                log.info("no Slurm accounting (%s): exit.json alone says how jobs ended", exc)
            self._has_sacct = False
            return {}
        self._has_sacct = True
        return states


def _by_id(rows: list[QueueRow]) -> dict[str, tuple[int, QueueRow]]:
    """`squeue`'s rows by Slurm job id, each with its place among the waiting jobs (in
    Slurm's order; 0 for one that does not wait)."""
    pending = [row for row in rows if phase(row.state) == Phase.waiting]
    positions = {row.slurm_id: n for n, row in enumerate(pending, 1)}
    return {row.slurm_id: (positions.get(row.slurm_id, 0), row) for row in rows}


def _apply_squeue(
    jobs: dict[int, HandedJob], by_id: dict[str, tuple[int, QueueRow]], final: dict[str, str]
) -> bool:
    """Brings `jobs` up to date with `squeue` (`by_id`) and, for those it no longer lists,
    `sacct` (`final`); whether any job's state or reason changed."""
    changed = False
    for job in jobs.values():
        before = (job.state, job.reason)
        if job.slurm_id in by_id:
            job.position, row = by_id[job.slurm_id]
            job.state, job.reason = row.state, row.reason
        else:
            job.state, job.reason = final.get(job.slurm_id, ""), ""
        changed |= (job.state, job.reason) != before
    return changed
