"""Memory caps that are really enforced: NVML's per-process memory, attributed to jobs by
process group, each job's peak recorded, and `GPUQ_OVER_CAP` applied (part of `enforce`)."""

import logging
import signal
import time

from gpuq.contract.states import Reason
from gpuq.service.jobs import writes
from gpuq.service.scheduler.memory import usage_by_job, worst_overrun
from gpuq.service.scheduler.running import Books

log = logging.getLogger(__name__)


class CapGuard:
    def __init__(self, books: Books) -> None:
        self.books = books
        self._last_sample = 0.0

    def check(self) -> None:
        """Records GPU memory peaks; kills a job over its cap under GPUQ_OVER_CAP=kill."""
        books = self.books
        now = time.monotonic()
        if books.gpus.inventory.probe is None or now - self._last_sample < books.settings.sample_s:
            return
        groups = books.executor.process_groups()
        on_gpus = {r.job_id: r for r in books.running.values() if r.gpus}
        groups = {pgid: job_id for pgid, job_id in groups.items() if job_id in on_gpus}
        if not groups:
            return
        self._last_sample = now
        usages = usage_by_job(books.gpus.readings().values(), groups)
        for job_id, running in on_gpus.items():
            record = running.memory
            mine = [u for u in usages if u.job_id == job_id]
            for u in mine:
                record.pids.setdefault(u.gpu_index, set()).update(u.pids)
            peak = max((u.memory_mb for u in mine), default=0)
            worst = worst_overrun(mine, record.cap_mb)
            warning = None
            if worst is not None:
                detail = (
                    f"used {worst.memory_mb} MiB on GPU {worst.gpu_index}, over its cap of "
                    f"{record.cap_mb} MiB"
                )
                if books.settings.over_cap == "kill":
                    log.warning("job %d: %s; killing it (GPUQ_OVER_CAP=kill)", job_id, detail)
                    self._kill(job_id, detail)
                elif not record.warned:
                    log.warning("job %d: %s (GPUQ_OVER_CAP=warn)", job_id, detail)
                    record.warned = True
                    warning = f"{detail} (GPUQ_OVER_CAP=warn)"
            higher = peak if peak > record.peak_mb else None
            record.peak_mb = max(record.peak_mb, peak)
            if higher is not None or warning is not None:
                with books.db.write() as session:
                    writes.record_memory(session, job_id, peak_mb=higher, warning=warning)

    def _kill(self, job_id: int, detail: str) -> None:
        with self.books.db.write() as session:
            writes.record_stop(session, job_id, Reason.memory_cap_exceeded, detail)
        # No grace: memory over the cap is memory another job was promised.
        self.books.executor.signal(job_id, signal.SIGKILL)
        self.books.running[job_id].killed = True
