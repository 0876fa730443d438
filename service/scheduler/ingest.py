"""Turns a job's `events.jsonl` into progress, metrics and the `running` state."""

import json
import logging
from pathlib import Path
from typing import Any

from sqlalchemy.dialects.sqlite import insert
from sqlmodel import Session

from service.db import utcnow
from service.jobs import transition
from service.models import Job, JobMetric
from service.states import JobStatus, Reason

log = logging.getLogger(__name__)

MAX_READ_BYTES = 4 * 1024 * 1024


def read_events(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """Complete lines after `offset`, parsed, and the offset after them.

    A line still being written (no newline yet) is left for the next read.
    """
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read(MAX_READ_BYTES)
    except FileNotFoundError:
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


def apply_events(session: Session, job: Job, events: list[dict[str, Any]], offset: int) -> None:
    """Records `events` on `job` (a row loaded in `session`) and moves its offset on."""
    assert job.id is not None
    values: dict[str, Any] = {"events_offset": offset}
    began_training = False
    for event in events:
        kind = event.get("event")
        if kind == "started":
            values["num_replicas"] = event.get("num_replicas")
        elif kind == "running":
            began_training = True
        elif kind in ("step", "epoch"):
            began_training = True
            values["progress"] = event.get("progress") or {}
            metrics = event.get("metrics") or {}
            values["metrics"] = metrics
            step = 0 if kind == "epoch" else int(event.get("step") or 0)
            _record_metrics(session, job, int(event.get("epoch") or 0), step, metrics)
        elif kind in ("failed", "stopped"):
            # Kept until the exit is reaped; the final judgement may override it.
            claimed = str(event.get("reason", "signal"))
            values["reason"] = Reason(claimed) if claimed in Reason.__members__ else Reason.signal
            values["message"] = str(event.get("message", ""))[:1000]
    for key, value in values.items():
        setattr(job, key, value)
    session.add(job)
    if began_training and job.status == JobStatus.starting:
        session.flush()
        transition(session, job.id, JobStatus.running)


def _record_metrics(
    session: Session, job: Job, epoch: int, step: int, metrics: dict[str, Any]
) -> None:
    statement = insert(JobMetric).values(
        job_id=job.id,
        attempt=job.attempt,
        epoch=epoch,
        step=step,
        values=metrics,
        recorded_at=utcnow(),
    )
    session.execute(
        statement.on_conflict_do_update(
            index_elements=["job_id", "epoch", "step"],
            set_={"values": metrics, "attempt": job.attempt, "recorded_at": utcnow()},
        )
    )
