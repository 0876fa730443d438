"""The first step: turns each running job's `events.jsonl` into progress, metrics and the
`running` state.

The job's own processes write that file: every line is checked against the contract
(`gpuq.contract.event_records`) before anything of it is stored, a bad one is skipped with
a warning, and a job whose events cannot be read or recorded is logged and passed over
(`isolation`), never the step for every job."""

import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy import bindparam, select
from sqlmodel import Session

from gpuq.contract import event_records, job_files
from gpuq.contract.states import JobStatus, Reason
from service.jobs import writes
from service.jobs.writes import JOB
from service.scheduler.isolation import apart, each_apart
from service.scheduler.running import Books, Running

log = logging.getLogger(__name__)

MAX_READ_BYTES = 4 * 1024 * 1024
#: lines read at a time: a job that floods its file waits for later steps, the others don't
MAX_READ_LINES = 1000

Metrics = tuple[int, int, dict[str, Any]]  #: (epoch, step, values)


def read_events(path: Path, offset: int) -> tuple[list[Any], int]:
    """Complete lines after `offset`, each parsed (None for one that is not JSON), and the
    offset after them.

    At most `MAX_READ_LINES` lines; a line still being written (no newline yet) is left for
    the next read; one longer than a read is skipped, as a None for each read of it. Blank
    lines are left out.
    """
    try:
        with job_files.open_file(path.parent, path.name) as f:
            f.seek(offset)
            chunk = f.read(MAX_READ_BYTES)
    except OSError:  # missing, not a regular file inside, a link to itself...: nothing yet
        return [], offset
    end = chunk.rfind(b"\n")
    if end < 0:
        if len(chunk) < MAX_READ_BYTES:
            return [], offset
        return [None], offset + len(chunk)
    lines = chunk[: end + 1].split(b"\n", MAX_READ_LINES)
    rest = lines.pop()  # empty, unless there are more lines than a read takes
    return [_parse(line) for line in lines if line.strip()], offset + end + 1 - len(rest)


def _parse(line: bytes) -> Any:
    try:
        return json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than json parses
        return None


@dataclass
class Digest:
    """What a batch of events says about its job."""

    values: dict[str, Any] = field(default_factory=dict)  #: the job's fields they change
    metrics: list[Metrics] = field(default_factory=list)  #: per `(epoch, step)`; step 0: epoch's
    began_training: bool = False  #: a step was reported, or the program started
    trained: bool = False  #: a step or an epoch was reported
    skipped: int = 0  #: lines that break the contract (`event_records`), not read
    problem: str = ""  #: what is wrong with the first of them


def digest_events(events: list[Any]) -> Digest:
    """What `events` (parsed lines) change on their job, and the metrics to record; a line
    that breaks the contract (`event_records`) is skipped and counted, the others count."""
    found = Digest()
    values, metrics = found.values, found.metrics
    for line in events:
        try:
            event = event_records.parse(line)
        except ValueError as exc:  # pydantic's ValidationError among them
            found.skipped += 1
            found.problem = found.problem or _problem(exc)
            continue
        if isinstance(event, event_records.StartedRecord):
            values["num_replicas"] = event.num_replicas
        elif isinstance(event, event_records.NodesRecord):
            values["nodes"] = [n.model_dump() for n in event.nodes]
        elif isinstance(event, event_records.RunningRecord):
            found.began_training = True
        elif isinstance(event, event_records.StepRecord):
            found.began_training = found.trained = True
            progress = event.progress.model_dump(exclude_unset=True) if event.progress else {}
            if event.epoch and not progress.get("epoch"):
                # `gpuq.report` tells only the epoch that ended: that is where training is.
                progress["epoch"] = event.epoch
            values["progress"] = progress
            recorded = event.metrics or {}
            values["metrics"] = recorded
            step = 0 if isinstance(event, event_records.EpochRecord) else event.step or 0
            metrics.append((event.epoch or 0, step, recorded))
        elif isinstance(event, event_records.FailedRecord):
            # The worker's own words on how it ended; `outcome.classify` uses them once the
            # exit is reaped.
            values["message"] = event.message[:1000]
    return found


def _problem(exc: ValueError) -> str:
    """What is wrong with a line, in a few words (never its value: the job chose it)."""
    if not isinstance(exc, ValidationError):
        return str(exc)
    error = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part)[:40] for part in error["loc"])
    return f"{where}: {error['msg']}"


#: what each job's new events say, and the offset after them: job id → both
Found = dict[int, tuple[Digest, int]]


def new_events(running: Running) -> tuple[Digest, int] | None:
    """What `running`'s events written after its offset say, and the offset after them;
    None if there is no new complete line (the file has not grown: one `stat`)."""
    path = running.run.events
    try:
        if job_files.lstat(path.parent, path.name).st_size <= running.offset:
            return None
    except OSError:
        return None
    events, end = read_events(path, running.offset)
    if end == running.offset:
        return None
    found = digest_events(events)
    if found.skipped:
        log.warning(
            "job %d: skipped %d line(s) of its events.jsonl that break the contract; the "
            "first: %.200r",
            running.job_id,
            found.skipped,
            found.problem,
        )
    return found, end


def read_new(runnings: Iterable[Running]) -> Found:
    """The new events of each of `runnings` that wrote a complete line; a job whose events
    cannot be read is logged and left out."""
    found: Found = {}
    for running in runnings:
        with apart(running.job_id, "read its events"):
            if (new := new_events(running)) is not None:
                found[running.job_id] = new
    return found


#: What recording a job's events reads of it (built once: every step runs it).
_STATES = select(JOB.c.id, JOB.c.attempt, JOB.c.status, JOB.c.stop_reason).where(
    JOB.c.id.in_(bindparam("ids", expanding=True))
)


def record_events(session: Session, found: Found) -> Found:
    """Records each job's digest and new offset in the caller's write transaction; a
    `starting` job whose training began becomes `running`. A job whose record fails is
    logged and its events are passed over (`advance` moves on all the same), so they do not
    fail every step after. Returns what `advance` moves on from: `found` but the jobs still
    `queued`, whose events wait for the step that marks them started."""
    rows = session.connection().execute(_STATES, {"ids": list(found)})
    jobs = {job_id: (attempt, status, stop_reason) for job_id, attempt, status, stop_reason in rows}
    # A queueing executor (Slurm) started the job after this step's look at its queue
    # (`follow`): read now, a command's one `running` event would be passed over, and the
    # job would stay `starting` to its end. Its events are read again once it is marked.
    waiting = {job_id for job_id, (_, status, _) in jobs.items() if status == JobStatus.queued}
    for job_id in waiting:
        del jobs[job_id]

    def write(job_id: int, row: tuple[int, JobStatus, Reason | None]) -> None:
        attempt, status, stop_reason = row
        events, end = found[job_id]
        values = {**events.values, "events_offset": end}
        if stop_reason is not None:
            # The scheduler's words on why it stopped the job outlast the job's own.
            values.pop("message", None)
        now_running = events.began_training and status == JobStatus.starting
        writes.record_progress(
            session, job_id, attempt, values, events.metrics, now_running=now_running
        )

    each_apart(session, jobs, write, "record its events")
    return {job_id: new for job_id, new in found.items() if job_id not in waiting}


def advance(books: Books, found: Found) -> None:
    """Once `found` is committed: the running jobs read on from there, those that trained
    are not idle, and early stopping learns that there are epochs to judge."""
    now = time.monotonic()
    for job_id, (events, end) in found.items():
        if any(step == 0 for _, step, _ in events.metrics):
            books.epochs_recorded += 1
        running = books.running.get(job_id)
        if running is None:  # reaped in the same transaction
            continue
        running.offset = end
        if events.trained:
            running.activity.last_step = now
