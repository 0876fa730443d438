"""Memory caps that are really enforced, and placement verified: NVML's per-process memory,
attributed to jobs by session; each job's peak recorded, `GPUQ_OVER_CAP` applied to
a job over its cap, and `GPUQ_OFF_GPU` to a job seen on a GPU it was not given (part of
`enforce`)."""

import logging
import signal
import time

from gpuq.contract.states import Reason
from service.gpus.nvml import DeviceReading
from service.jobs import writes
from service.scheduler.isolation import apart
from service.scheduler.memory import Usage, usage_by_job, worst_overrun
from service.scheduler.running import Books, Running

log = logging.getLogger(__name__)


class CapGuard:
    def __init__(self, books: Books) -> None:
        self.books = books
        self._last_sample = 0.0

    def check(self) -> None:
        """Samples NVML (every `GPUQ_SAMPLE_S`) and judges each running job by it."""
        books = self.books
        now = time.monotonic()
        if books.gpus.inventory.probe is None or now - self._last_sample < books.settings.sample_s:
            return
        sessions = books.executor.job_sessions()
        # CPU jobs too: a `gpus: 0` job seen on a GPU is off its placement like any other.
        sessions = {sid: job_id for sid, job_id in sessions.items() if job_id in books.running}
        if not sessions:
            return
        self._last_sample = now
        readings = books.gpus.readings()
        usages = usage_by_job(readings.values(), sessions)
        for job_id, running in books.running.items():
            with apart(job_id, "check its GPU memory"):
                self._judge(running, readings, [u for u in usages if u.job_id == job_id])

    def _judge(
        self, running: Running, readings: dict[int, DeviceReading], mine: list[Usage]
    ) -> None:
        """Judges one running job by the sample: `mine`, its processes' usage."""
        busy = [readings[i].utilization_pct for i in running.gpus if i in readings]
        known = [u for u in busy if u is not None]
        running.memory.util_pct = max(known, default=None)
        if running.memory.sample_utilisation(known):
            with self.books.db.write() as session:
                writes.record_utilisation(
                    session,
                    running.job_id,
                    running.memory.util_avg_pct,
                    running.memory.util_samples,
                )
        for u in mine:
            running.memory.pids.setdefault(u.gpu_index, set()).update(u.pids)
        off = [u for u in mine if u.gpu_index not in running.gpus]
        if off and self._off_gpu(running, off):
            return
        self._memory(running, [u for u in mine if u.gpu_index in running.gpus])

    def _memory(self, running: Running, mine: list[Usage]) -> None:
        """Records a higher peak; applies `GPUQ_OVER_CAP` to a job over its cap."""
        record, job_id = running.memory, running.job_id
        peak = max((u.memory_mb for u in mine), default=0)
        record.held_mb = sum(u.memory_mb for u in mine)
        worst = worst_overrun(mine, record.cap_mb)
        warning = None
        if worst is not None:
            detail = (
                f"used {worst.memory_mb} MiB on GPU {worst.gpu_index}, over its cap of "
                f"{record.cap_mb} MiB"
            )
            if self.books.settings.over_cap == "kill":
                log.warning("job %d: %s; killing it (GPUQ_OVER_CAP=kill)", job_id, detail)
                self._kill(job_id, Reason.memory_cap_exceeded, detail)
            elif not record.warned:
                log.warning("job %d: %s (GPUQ_OVER_CAP=warn)", job_id, detail)
                record.warned = True
                warning = f"{detail} (GPUQ_OVER_CAP=warn)"
        higher = peak if peak > record.peak_mb else None
        record.peak_mb = max(record.peak_mb, peak)
        if higher is not None or warning is not None:
            with self.books.db.write() as session:
                writes.record_memory(session, job_id, peak_mb=higher, warning=warning)

    def _off_gpu(self, running: Running, off: list[Usage]) -> bool:
        """Records each GPU the job uses without being given it (once per GPU) and applies
        `GPUQ_OFF_GPU`; True if the job is being killed for it."""
        policy = self.books.settings.off_gpu
        given = ", ".join(map(str, running.gpus)) or "none"
        for u in off:
            if u.gpu_index in running.memory.off_gpus:
                continue
            running.memory.off_gpus.add(u.gpu_index)
            pids = ", ".join(map(str, u.pids))
            detail = (
                f"pid {pids} used {u.memory_mb} MiB on GPU {u.gpu_index}, which the job was "
                f"not given (its GPUs: {given})"
            )
            log.warning("job %d: %s (GPUQ_OFF_GPU=%s)", running.job_id, detail, policy)
            with self.books.db.write() as session:
                writes.record_placement_violation(
                    session,
                    running.job_id,
                    gpu=u.gpu_index,
                    pids=u.pids,
                    memory_mb=u.memory_mb,
                    warning=f"{detail} (GPUQ_OFF_GPU={policy})",
                )
            if policy == "kill":
                self._kill(running.job_id, Reason.placement_violation, detail)
                return True
        return False

    def _kill(self, job_id: int, cause: Reason, detail: str) -> None:
        with self.books.db.write() as session:
            writes.record_stop(session, job_id, cause, detail)
        # No grace: the memory is another job's, by its cap or by its GPU.
        self.books.executor.signal(job_id, signal.SIGKILL)
        self.books.running[job_id].killed = True
