"""Free means free: a finished job's GPUs drain until its processes and memory are gone,
then are free again, or quarantined after `GPUQ_DRAIN_TIMEOUT_S` (the `drain` step).

Only GPUs with live readings (NVML, or a test's stand-in) drain: a simulated GPU has
nothing to watch and is free as soon as its job ends.
"""

import logging

from sqlmodel import Session, col, select

from gpuq.contract.states import GpuState
from service.gpus.registry import change_state
from service.jobs.writes import JOB
from service.scheduler.memory import check_drained
from service.scheduler.running import Books, Running
from service.store.db import utcnow
from service.store.tables import Gpu

log = logging.getLogger(__name__)


def start_draining(books: Books, session: Session, running: Running) -> None:
    """Marks a finished job's GPUs draining, with the processes seen holding memory there,
    in the caller's write transaction."""
    if books.gpus.inventory.probe is None:
        return
    for index in running.gpus:
        change_state(
            session,
            index,
            GpuState.draining,
            state_reason=f"draining after job {running.job_id}",
            drain_job_id=running.job_id,
            drain_pids=sorted(running.memory.pids.get(index, ())),
        )


def drain(books: Books) -> bool:
    """Frees drained GPUs and quarantines stuck ones; True if any GPU was freed."""
    if books.gpus.inventory.probe is None:
        return False
    with books.db.read() as session:
        draining = list(session.exec(select(Gpu).where(col(Gpu.state) == GpuState.draining)).all())
        if not draining:
            return False
        ended = [g.drain_job_id for g in draining]
        query = select(JOB.c.id, JOB.c.runner_pid).where(JOB.c.id.in_(ended))
        sessions: dict[int | None, int | None] = {
            job_id: sid for job_id, sid in session.connection().execute(query)
        }
    readings = books.gpus.readings()
    slack_mb, timeout_s = books.settings.drain_slack_mb, books.settings.drain_timeout_s
    freed = False
    now = utcnow()
    for gpu in draining:
        reading = readings.get(gpu.index)
        if reading is None:
            continue
        check = check_drained(reading, sessions.get(gpu.drain_job_id), gpu.drain_pids, slack_mb)
        assert gpu.state_since is not None
        waited = (now - gpu.state_since).total_seconds()
        if check.done:
            with books.db.write() as session:
                change_state(session, gpu.index, GpuState.free)
            log.info("GPU %d: drained after job %s; free again", gpu.index, gpu.drain_job_id)
            freed = True
        elif waited > timeout_s:
            if check.leftover_pids:
                pids = ", ".join(map(str, check.leftover_pids))
                held = f"{check.leftover_mb} MiB still held by pid {pids} of job {gpu.drain_job_id}"
            else:
                held = f"{check.unaccounted_mb} MiB in use that no process accounts for"
            reason = f"{held} {waited:.0f} s after job {gpu.drain_job_id} ended"
            with books.db.write() as session:
                change_state(session, gpu.index, GpuState.quarantined, state_reason=reason)
            log.warning("GPU %d: quarantined: %s", gpu.index, reason)
    return freed
