"""The first step: turns each running job's `events.jsonl` into progress, metrics and the
`running` state."""

import json
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlmodel import Session

from gpuq.contract.events import Event
from gpuq.contract.safe_open import open_inside
from gpuq.contract.states import JobStatus
from service.jobs import writes
from service.jobs.writes import JOB
from service.scheduler.running import Books, Running

log = logging.getLogger(__name__)

MAX_READ_BYTES = 4 * 1024 * 1024

Metrics = tuple[int, int, dict[str, Any]]  #: (epoch, step, values)


def read_events(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """Complete lines after `offset`, parsed, and the offset after them.

    A line still being written (no newline yet) is left for the next read.
    """
    try:
        with open_inside(path, path.parent) as f:
            f.seek(offset)
            chunk = f.read(MAX_READ_BYTES)
    except (FileNotFoundError, PermissionError):
        return [], offset
    end = chunk.rfind(b"\n")
    if end < 0:
        return [], offset
    events = []
    for line in chunk[: end + 1].splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            log.warning("skipping a malformed event line in %s", path)
            continue
        if isinstance(event, dict):
            events.append(event)
    return events, offset + end + 1


@dataclass
class Digest:
    """What a batch of events says about its job."""

    values: dict[str, Any] = field(default_factory=dict)  #: the job's fields they change
    metrics: list[Metrics] = field(default_factory=list)  #: per `(epoch, step)`; step 0: epoch's
    began_training: bool = False  #: a step was reported, or the program started
    trained: bool = False  #: a step or an epoch was reported


def digest(events: list[dict[str, Any]]) -> Digest:
    """What `events` change on their job, and the metrics to record."""
    found = Digest()
    values, metrics = found.values, found.metrics
    for event in events:
        kind = event.get("event")
        if kind == Event.started:
            values["num_replicas"] = event.get("num_replicas")
        elif kind == Event.running:
            found.began_training = True
        elif kind in (Event.step, Event.epoch):
            found.began_training = found.trained = True
            values["progress"] = event.get("progress") or {}
            recorded = event.get("metrics") or {}
            values["metrics"] = recorded
            step = 0 if kind == Event.epoch else int(event.get("step") or 0)
            metrics.append((int(event.get("epoch") or 0), step, recorded))
        elif kind in (Event.failed, Event.stopped):
            # The worker's own words on how it ended; `outcome.classify` uses them once the
            # exit is reaped.
            values["message"] = str(event.get("message", ""))[:1000]
    return found


#: what each job's new events say, and the offset after them: job id → both
Found = dict[int, tuple[Digest, int]]


def new_events(running: Running) -> tuple[Digest, int] | None:
    """What `running`'s events written after its offset say, and the offset after them;
    None if there is no new complete line (the file has not grown: one `stat`)."""
    path = running.run.events
    try:
        # lstat: the job owns the file; what it points to is `open_inside`'s to judge.
        if os.lstat(path).st_size <= running.offset:
            return None
    except OSError:
        return None
    events, end = read_events(path, running.offset)
    if end == running.offset:
        return None
    return digest(events), end


def read_new(runnings: Iterable[Running]) -> Found:
    """The new events of each of `runnings` that wrote a complete line."""
    return {r.job_id: new for r in runnings if (new := new_events(r)) is not None}


def record(session: Session, found: Found) -> None:
    """Records each job's digest and new offset in the caller's write transaction; a
    `starting` job whose training began becomes `running`."""
    rows = session.connection().execute(
        select(JOB.c.id, JOB.c.attempt, JOB.c.status, JOB.c.stop_reason).where(
            JOB.c.id.in_(list(found))
        )
    )
    for job_id, attempt, status, stop_reason in rows:
        events, end = found[job_id]
        values = {**events.values, "events_offset": end}
        if stop_reason is not None:
            # The scheduler's words on why it stopped the job outlast the job's own.
            values.pop("message", None)
        now_running = events.began_training and status == JobStatus.starting
        writes.record_progress(
            session, job_id, attempt, values, events.metrics, now_running=now_running
        )


def advance(books: Books, found: Found) -> None:
    """Once `found` is committed: the running jobs read on from there, and those that
    trained are not idle."""
    now = time.monotonic()
    for job_id, (events, end) in found.items():
        running = books.running.get(job_id)
        if running is None:  # reaped in the same transaction
            continue
        running.offset = end
        if events.trained:
            running.activity.last_step = now
