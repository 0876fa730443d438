"""Placement requests from queued jobs and from specs."""

from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Select, select
from sqlmodel import col

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus
from service.scheduler.placement import Request
from service.store.tables import Job

#: The id a dry run's job takes: after every real job, as a job submitted now would be.
PREVIEW_ID = 2**62


@dataclass(frozen=True)
class QueuedJob:
    """What planning reads of a queued job: a few columns, not the whole row, since every
    scheduler step reads every queued job."""

    id: int
    owner: str
    priority: int
    gpu_count: int
    memory_mb: int | None
    gpu_ids: tuple[int, ...] | None
    time_limit_s: float | None
    depends_on: list[int]
    held: bool
    retry_at: datetime | None
    not_before: datetime | None
    wait_reason: str | None
    queue_position: int | None
    sweep_id: int | None

    @property
    def waits_until(self) -> list[datetime]:
        """The moments it waits for before it may start: its retry, its `not_before`."""
        return [m for m in (self.retry_at, self.not_before) if m is not None]

    @classmethod
    @cache
    def query(cls) -> Select[Any]:
        """The queued jobs, as rows `from_row` reads (the database picks the spec's fields).
        Built once: every scheduler step runs it."""
        return select(
            col(Job.id),
            col(Job.owner),
            col(Job.priority),
            col(Job.gpu_count),
            col(Job.memory_mb),
            col(Job.spec)[("resources", "gpu_ids")].label("gpu_ids"),
            col(Job.spec)["time_limit_s"].as_float().label("time_limit_s"),
            col(Job.depends_on),
            col(Job.held),
            col(Job.retry_at),
            col(Job.not_before),
            col(Job.wait_reason),
            col(Job.queue_position),
            col(Job.sweep_id),
        ).where(col(Job.status) == JobStatus.queued)

    @classmethod
    def from_row(cls, row: Any) -> "QueuedJob":
        values = dict(row._mapping)
        values["gpu_ids"] = tuple(values["gpu_ids"]) if values["gpu_ids"] else None
        values["depends_on"] = list(values["depends_on"] or [])
        values["held"] = bool(values["held"])
        return cls(**values)


def request_for_job(job: QueuedJob) -> Request:
    """A queued job's request."""
    return Request(
        job_id=job.id,
        priority=job.priority,
        gpus=job.gpu_count,
        gpu_ids=job.gpu_ids,
        memory_mb=job.memory_mb,
        owner=job.owner,
        time_limit_s=job.time_limit_s,
        sweep_id=job.sweep_id,
    )


def request_for_spec(job_id: int, spec: JobSpec, owner: str) -> Request:
    """The request a spec would make, e.g. for a dry run."""
    res = spec.resources
    return Request(
        job_id=job_id,
        priority=spec.priority,
        gpus=res.gpu_count,
        gpu_ids=tuple(res.gpu_ids) if res.gpu_ids else None,
        memory_mb=res.memory_mb if res.gpu_count else None,
        owner=owner,
        time_limit_s=spec.time_limit_s,
    )
