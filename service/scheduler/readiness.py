"""Whether a queued job may start yet, or ever: its hold, its retry back-off, its
`not_before`, and the jobs it depends on. Planning (`snapshot`) and the hand-over to an
executor with a queue of its own (`handover`) both ask."""

import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Protocol

from gpuq.contract.states import TERMINAL, JobStatus, Reason
from service.scheduler.queued import QueuedJob
from service.store.tables import Job


class Dependency(Protocol):
    """What a job's dependents need to know of it (a `Job`, or a row of these columns)."""

    @property
    def id(self) -> int | None: ...
    @property
    def status(self) -> JobStatus: ...
    @property
    def reason(self) -> Reason | None: ...


def failed_dependency(
    job: QueuedJob | Job, dependencies: Mapping[int | None, Dependency]
) -> str | None:
    """Why `job` can never start, if one of the jobs it depends on will never succeed."""
    for dep_id in job.depends_on:
        dep = dependencies.get(dep_id)
        if dep is None:
            return f"it depends on job {dep_id}, which no longer exists"
        if dep.status in TERMINAL and dep.status != JobStatus.succeeded:
            why = f" ({dep.reason.value})" if dep.reason else ""
            return f"it depends on job {dep_id}, which ended {dep.status.value}{why}"
    return None


def not_considered(
    job: QueuedJob, dependencies: Mapping[int | None, Dependency], now: datetime
) -> str | None:
    """Why `job` is not considered for placement now (hold, retry back-off, not_before,
    dependency)."""
    if job.held:
        return f"held: `POST /v1/jobs/{job.id}/release` lets it start"
    if job.retry_at is not None and job.retry_at > now:
        return job.wait_reason or "waiting to retry"
    early = not_yet(job.not_before, now)
    if early is not None:
        return early
    pending = [d for d in job.depends_on if dependencies[d].status != JobStatus.succeeded]
    if pending:
        first = dependencies[pending[0]]
        return f"waiting for job {first.id} to succeed (it is {first.status.value})"
    return None


def not_yet(not_before: datetime | None, now: datetime) -> str | None:
    """Why a job with this `not_before` may not start at `now`; None once it may."""
    if not_before is None or not_before <= now:
        return None
    return f"not before {not_before.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ} ({_in(not_before - now)})"


def _in(left: timedelta) -> str:
    # Whole minutes only: a wait reason is written again whenever its words change.
    if left.total_seconds() < 60:
        return "in under a minute"
    minutes = math.ceil(left.total_seconds() / 60)
    if minutes < 60:
        return f"in {minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"in {hours} h {minutes} min" if minutes else f"in {hours} h"
    return f"in {hours // 24} days"
