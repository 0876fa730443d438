"""Finishing jobs (the `reap` step): each exit the executor reports is judged
(`contract.outcome`), the job ends or is queued again for a retry, and its GPUs drain.

All the exits of one step, with their last events, are written in one write transaction;
the loop adds the `ingest` step's events of the jobs still running to it (`settle`), so a
step commits once for everything its jobs said and did. A job whose exit cannot be recorded
is undone alone (`isolation.each_apart`) and ends `UNSETTLED`."""

import logging
import os
from pathlib import Path

from sqlalchemy import bindparam, select
from sqlmodel import Session

from gpuq.contract.job_files import open_file
from gpuq.contract.outcome import Outcome, classify
from gpuq.contract.run_records import parse_exit
from gpuq.contract.states import JobStatus, Reason
from service.executors import Exit
from service.jobs import writes
from service.jobs.writes import JOB, JobRow
from service.public import readable_progress
from service.scheduler import ingest
from service.scheduler.drain import start_draining
from service.scheduler.isolation import each_apart
from service.scheduler.retries import retry_delay
from service.scheduler.running import Books, Running
from service.scheduler.starting import record_launches

log = logging.getLogger(__name__)

#: the last lines of its log a job that did not succeed keeps (`log_tail`)
LOG_TAIL_LINES = 50
#: the last lines of its log its end is judged by: a crash's stacks can run to hundreds
#: (`gpuq.contract.crash_site`)
JUDGED_LINES = 1000

#: How a job ends whose exit could not be settled (`each_apart` logged why).
UNSETTLED = Outcome(
    JobStatus.failed,
    Reason.worker_lost,
    "gpuq could not record how the job ended (its exit record or last events do not fit); "
    "the service log says why",
    None,
)

#: What judging an exit reads of its jobs (built once: every exit runs it).
_JUDGED = select(
    JOB.c.id,
    JOB.c.attempt,
    JOB.c.message,
    JOB.c.stop_reason,
    JOB.c.spec,
    JOB.c.progress,
    JOB.c.previous_attempts,
    JOB.c.preempted_by,
    JOB.c.preemptions,
).where(JOB.c.id.in_(bindparam("ids", expanding=True)))


def settle(books: Books) -> None:
    """The `ingest` and `reap` steps in one write transaction, with what the launches since
    the last write added (`starting.record_launches`): every running job's new events, then
    the exits with their jobs' last events, judged; their GPUs drain (no transaction if
    nothing was launched, written or ended)."""
    ended = _ended(books)
    # Read after the exits are known, so an ended job's events are all there; and before
    # the write lock is taken: nothing else writes these files now.
    found = ingest.read_new([r for r, _ in ended])
    found.update(ingest.read_new(list(books.running.values())))
    launched = dict(books.unrecorded)
    if not ended and not found and not launched:
        return
    tails = {r.job_id: tail_log(r.run.log, JUDGED_LINES) for r, _ in ended}
    with books.db.write() as session:
        record_launches(session, books.executor.name, launched)
        if found:
            found = ingest.record_events(session, found)
        said = _finish_all(books, session, ended, tails)
    for job_id in launched:
        books.unrecorded.pop(job_id, None)
    ingest.advance(books, found)
    for running, (outcome, retry_in) in said:
        log.info(
            "job %d: %s (%s) %s",
            running.job_id,
            outcome.status.value if retry_in is None else f"retrying in {retry_in:g} s",
            outcome.reason or "-",
            # The job's own words may be in it: one line of the log, never a forged one.
            (outcome.message or "").replace("\n", "\\n"),
        )


def _ended(books: Books) -> list[tuple[Running, Exit]]:
    """The running jobs whose exit the executor reports, taken out of `books.running`."""
    ended = []
    for exit in books.executor.exited():
        running = books.running.pop(exit.job_id, None)
        if running is not None:
            ended.append((running, exit))
        else:
            log.warning("job %d: an exit for a job this scheduler does not run", exit.job_id)
    return ended


def _finish_all(
    books: Books,
    session: Session,
    ended: list[tuple[Running, Exit]],
    tails: dict[int, list[str]],
) -> list[tuple[Running, tuple[Outcome, float | None]]]:
    if not ended:
        return []
    rows = session.connection().execute(_JUDGED, {"ids": [r.job_id for r, _ in ended]})
    jobs = {row.id: row for row in rows}
    judged = {r.job_id: (r, exit, jobs[r.job_id]) for r, exit in ended if r.job_id in jobs}

    def finish(job_id: int, item: tuple[Running, Exit, JobRow]) -> tuple[Outcome, float | None]:
        running, exit, job = item
        return finish_job(books, session, running, exit, job, tails[job_id])

    done, failed = each_apart(session, judged, finish, "settle its exit")
    for job_id in failed:
        # Its exit is reported once: ended now, or never, with its GPUs held for good.
        writes.finish(session, job_id, UNSETTLED, [])
        start_draining(books, session, judged[job_id][0])
        done[job_id] = (UNSETTLED, None)
    return [(judged[job_id][0], said) for job_id, said in done.items()]


def finish_job(
    books: Books,
    session: Session,
    running: Running,
    exit: Exit,
    job: JobRow,
    tail: list[str],
) -> tuple[Outcome, float | None]:
    """Ends the job as its exit says (or queues it again) and drains its GPUs, in the
    caller's write transaction (`tail`: its log's last `JUDGED_LINES`, of which it keeps
    `LOG_TAIL_LINES`); the outcome, and the seconds until its retry (None: none)."""
    outcome = judge_exit(exit, job, tail)
    tail = tail[-LOG_TAIL_LINES:]
    memory = running.memory
    writes.record_utilisation(session, running.job_id, memory.util_avg_pct, memory.util_samples)
    if exit.usage is not None:
        used = exit.usage
        writes.record_host_usage(session, running.job_id, used.memory_peak_mb, used.cpu_time_s)
    if outcome.status == JobStatus.succeeded:
        tail = []
    if outcome.status == JobStatus.queued:  # preempted: no failure, so no retry counts
        retry_in: float | None = 0.0
    else:
        failures = job.attempt - job.preemptions
        retry_in = retry_delay(outcome, failures, job.spec, books.settings)
    if retry_in is None:
        writes.finish(session, running.job_id, outcome, tail)
    else:
        writes.requeue(
            session,
            running.job_id,
            outcome,
            tail,
            retry_in,
            attempt=job.attempt,
            last_epoch=readable_progress(job.progress).epoch,
            previous_attempts=job.previous_attempts,
            preempted_by=job.preempted_by if outcome.reason == Reason.preempted else None,
        )
    start_draining(books, session, running)
    return outcome, retry_in


def judge_exit(exit: Exit, job: JobRow, tail: list[str]) -> Outcome:
    """How the job ended: the runner's record, unless the executor knows better (Slurm ended
    it at its limit, its node failed, it was preempted) and gpuq neither stopped it itself
    nor saw it succeed. A record that breaks the contract (`run_records.ExitRecord`: the
    job's processes can write it) is logged and judged as none."""
    record, problem = parse_exit(exit.record)
    if problem is not None:
        log.warning(
            "job %d: its exit.json breaks the contract (%s); judged as if it left none",
            exit.job_id,
            problem,
        )
    code = record.exit_code if record is not None else None
    verdict = exit.verdict
    if verdict is not None and code != 0 and job.stop_reason is None:
        return Outcome(verdict.status, verdict.reason, verdict.message, code)
    return classify(
        exit_info=record,
        detail=job.message,
        stop_reason=job.stop_reason,
        time_limit_s=job.spec.get("time_limit_s"),
        builtin=job.spec.get("kind") == "keras",
        log_tail=tail,
        preempted_by=job.preempted_by,
    )


def tail_log(path: Path, lines: int) -> list[str]:
    """The last lines of a job's log (read from its last 64 KiB)."""
    try:
        with open_file(path.parent, path.name) as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError:  # missing, not a regular file inside, a link to itself...
        return []
    return text.splitlines()[-lines:]
