"""Finishing a job (the `reap` step): each exit the executor reports is judged
(`contract.outcome`), the job ends or is queued again for a retry, and its GPUs drain."""

import logging
import os
from pathlib import Path

from gpuq.contract.outcome import Outcome, classify
from gpuq.contract.safe_open import open_inside
from gpuq.contract.states import JobStatus
from gpuq.service.executors import Exit
from gpuq.service.jobs import writes
from gpuq.service.scheduler.drain import start_draining
from gpuq.service.scheduler.ingest import ingest
from gpuq.service.scheduler.retries import retry_delay
from gpuq.service.scheduler.running import Books, Running
from gpuq.service.tables import Job

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 50


def reap(books: Books) -> None:
    """Judges every job whose processes have exited, and frees its GPUs."""
    for exit in books.executor.exited():
        running = books.running.pop(exit.job_id, None)
        if running is None:
            log.warning("job %d: an exit for a job this scheduler does not run", exit.job_id)
            continue
        ingest(books.db, running.job_id, running.run.events, running.offset)  # its last words
        finish_job(books, running, exit)


def finish_job(books: Books, running: Running, exit: Exit) -> None:
    """Ends the job as its exit says (or queues it again), then drains its GPUs."""
    with books.db.write() as session:
        job = session.get(Job, running.job_id)
        if job is None:
            return
        tail = tail_log(running.run.log)
        outcome = judge(exit, job, tail)
        if outcome.status == JobStatus.succeeded:
            tail = []
        if outcome.status == JobStatus.queued:  # preempted: no failure, so no retry counts
            retry_in: float | None = 0.0
        else:
            retry_in = retry_delay(outcome, job, books.settings)
        if retry_in is None:
            writes.finish(session, running.job_id, outcome, tail)
        else:
            writes.requeue(session, job, outcome, tail, retry_in)
    start_draining(books, running)
    log.info(
        "job %d: %s (%s) %s",
        running.job_id,
        outcome.status.value if retry_in is None else f"retrying in {retry_in:g} s",
        outcome.reason or "-",
        outcome.message,
    )


def judge(exit: Exit, job: Job, tail: list[str]) -> Outcome:
    """How the job ended: the runner's record, unless the executor knows better (Slurm ended
    it at its limit, its node failed, it was preempted) and gpuq neither stopped it itself
    nor saw it succeed."""
    code = exit.record.get("exit_code") if exit.record else None
    verdict = exit.verdict
    if verdict is not None and code != 0 and job.stop_reason is None:
        return Outcome(verdict.status, verdict.reason, verdict.message, code)
    return classify(
        exit_info=exit.record,
        detail=job.message,
        stop_reason=job.stop_reason,
        time_limit_s=job.spec.get("time_limit_s"),
        builtin=job.spec.get("kind") == "keras",
        log_tail=tail,
    )


def tail_log(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last lines of a job's log (read from its last 64 KiB)."""
    try:
        with open_inside(path, path.parent) as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode(errors="replace")
    except (FileNotFoundError, PermissionError):
        return []
    return text.splitlines()[-lines:]
