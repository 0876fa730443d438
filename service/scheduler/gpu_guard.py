"""Keeps the GPU promises that need live readings: caps enforced, and free means free.

`sample` attributes NVML's per-process memory to jobs, records each job's peak and applies
`GPUQ_OVER_CAP`. `hold` marks a finished job's GPUs `draining`; `drain` frees them once
the job's processes and memory are gone, or quarantines them after `drain_timeout_s`.
"""

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlalchemy import update
from sqlmodel import col, select

from service.db import Database, utcnow
from service.gpus.board import UNHELD, Board
from service.models import Gpu, Job
from service.scheduler.memory import check_drained, usage_by_job, worst_overrun
from service.settings import Settings
from service.states import Reason

log = logging.getLogger(__name__)

DRAINING, QUARANTINED = "draining", "quarantined"


@dataclass
class MemoryWatch:
    """What sampling has learnt about one running job."""

    cap_mb: int | None
    peak_mb: int = 0
    warned: bool = False
    #: GPU index → pids seen holding memory there (a dead pid's memory can linger)
    pids: dict[int, set[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Overrun:
    job_id: int
    detail: str


class GpuGuard:
    def __init__(self, db: Database, settings: Settings, board: Board) -> None:
        self.db = db
        self.settings = settings
        self.board = board
        self._last_sample = 0.0

    @property
    def active(self) -> bool:
        return self.board.inventory.probe is not None

    def sample(
        self, groups: Mapping[int, int], watches: Mapping[int, MemoryWatch]
    ) -> list[Overrun]:
        """Reads per-job memory; records peaks; returns the jobs to kill for going over cap."""
        now = time.monotonic()
        if not self.active or not groups or now - self._last_sample < self.settings.sample_s:
            return []
        self._last_sample = now
        usages = usage_by_job(self.board.readings().values(), groups)
        to_kill = []
        for job_id, watch in watches.items():
            mine = [u for u in usages if u.job_id == job_id]
            for u in mine:
                watch.pids.setdefault(u.gpu_index, set()).update(u.pids)
            peak = max((u.memory_mb for u in mine), default=0)
            worst = worst_overrun(mine, watch.cap_mb)
            values: dict[str, object] = {}
            if peak > watch.peak_mb:
                watch.peak_mb = peak
                values["gpu_memory_peak_mb"] = peak
            if worst is not None:
                detail = (
                    f"used {worst.memory_mb} MiB on GPU {worst.gpu_index}, over its cap of "
                    f"{watch.cap_mb} MiB"
                )
                if self.settings.over_cap == "kill":
                    log.warning("job %d: %s; killing it (GPUQ_OVER_CAP=kill)", job_id, detail)
                    to_kill.append(Overrun(job_id, detail))
                elif not watch.warned:
                    log.warning("job %d: %s (GPUQ_OVER_CAP=warn)", job_id, detail)
                    watch.warned = True
                    values["warnings"] = [f"{detail} (GPUQ_OVER_CAP=warn)"]
            if values:
                self._update_job(job_id, values)
        return to_kill

    def _update_job(self, job_id: int, values: dict[str, object]) -> None:
        with self.db.write() as session:
            job = session.get(Job, job_id)
            if job is None:
                return
            if "warnings" in values:
                values["warnings"] = [*job.warnings, *values["warnings"]]  # type: ignore[misc]
            session.execute(update(Job).where(col(Job.id) == job_id).values(**values))

    def hold(self, job_id: int, gpu_indices: list[int], watch: MemoryWatch | None) -> None:
        """Marks a finished job's GPUs draining (only where live readings can clear them)."""
        if not self.active or not gpu_indices:
            return
        now = utcnow()
        with self.db.write() as session:
            for index in gpu_indices:
                pids = sorted(watch.pids.get(index, ())) if watch else []
                session.execute(
                    update(Gpu)
                    .where(col(Gpu.index) == index, col(Gpu.hold).is_(None))
                    .values(
                        hold=DRAINING,
                        hold_reason=f"draining after job {job_id}",
                        hold_job_id=job_id,
                        hold_pids=pids,
                        hold_since=now,
                    )
                )

    def drain(self) -> bool:
        """Frees drained GPUs and quarantines stuck ones; True if any GPU was freed."""
        if not self.active:
            return False
        with self.db.read() as session:
            draining = list(session.exec(select(Gpu).where(col(Gpu.hold) == DRAINING)).all())
            pgids = {
                j.id: j.runner_pid
                for j in session.exec(
                    select(Job).where(col(Job.id).in_([g.hold_job_id for g in draining]))
                )
            }
        if not draining:
            return False
        readings = self.board.readings()
        freed = False
        now = utcnow()
        for gpu in draining:
            reading = readings.get(gpu.index)
            if reading is None:
                continue
            pgid = pgids.get(gpu.hold_job_id)
            check = check_drained(reading, pgid, gpu.hold_pids, self.settings.drain_slack_mb)
            assert gpu.hold_since is not None
            waited = (now - gpu.hold_since).total_seconds()
            if check.done:
                self._set_hold(gpu.index, None, None)
                log.info("GPU %d: drained after job %s; free again", gpu.index, gpu.hold_job_id)
                freed = True
            elif waited > self.settings.drain_timeout_s:
                if check.leftover_pids:
                    pids = ", ".join(map(str, check.leftover_pids))
                    held = (
                        f"{check.leftover_mb} MiB still held by pid {pids} of job {gpu.hold_job_id}"
                    )
                else:
                    held = f"{check.unaccounted_mb} MiB in use that no process accounts for"
                reason = f"{held} {waited:.0f} s after job {gpu.hold_job_id} ended"
                self._set_hold(gpu.index, QUARANTINED, reason)
                log.warning("GPU %d: quarantined: %s", gpu.index, reason)
        return freed

    def _set_hold(self, index: int, hold: str | None, reason: str | None) -> None:
        values = dict(UNHELD) if hold is None else {"hold": hold, "hold_reason": reason}
        with self.db.write() as session:
            session.execute(update(Gpu).where(col(Gpu.index) == index).values(**values))


def kill_reason(detail: str) -> dict[str, object]:
    """The job fields that record an over-cap kill before the signal goes out."""
    return {
        "stop_reason": Reason.memory_cap_exceeded,
        "reason": Reason.memory_cap_exceeded,
        "message": detail,
        "stop_sent_at": utcnow(),
    }
