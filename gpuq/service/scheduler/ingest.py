"""The first step: turns each running job's `events.jsonl` into progress, metrics and the
`running` state."""

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuq.contract.events import Event
from gpuq.contract.safe_open import open_inside
from gpuq.service.db import Database
from gpuq.service.jobs import writes
from gpuq.service.scheduler.running import Books
from gpuq.service.tables import Job

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


def ingest(db: Database, job_id: int, path: Path, offset: int) -> tuple[int, bool]:
    """Records the events of job `job_id` written after `offset`; the offset after them,
    and whether they reported training (a step or an epoch). No new line, no write
    transaction."""
    events, end = read_events(path, offset)
    if end == offset:
        return offset, False
    found = digest(events)
    with db.write() as session:
        job = session.get(Job, job_id)
        if job is not None:
            values = {**found.values, "events_offset": end}
            if job.stop_reason is not None:
                # The scheduler's words on why it stopped the job outlast the job's own.
                values.pop("message", None)
            writes.record_progress(
                session, job, values, found.metrics, began_training=found.began_training
            )
    return end, found.trained


def ingest_running(books: Books) -> None:
    """The step: every running job's new events."""
    for running in list(books.running.values()):
        running.offset, trained = ingest(
            books.db, running.job_id, running.run.events, running.offset
        )
        if trained:
            running.activity.last_step = time.monotonic()
