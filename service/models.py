"""Database tables and the public shapes the API returns."""

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field as PydanticField
from sqlalchemy import JSON, Column, Index, UniqueConstraint
from sqlmodel import Field, SQLModel

from service.db import UTCDateTime, utcnow
from service.spec import JobSpec
from service.states import JobStatus, Reason


def _utc(**kwargs: Any) -> Any:
    return Field(sa_type=UTCDateTime, **kwargs)


class Job(SQLModel, table=True):
    __table_args__ = (Index("ix_job_status_priority", "status", "priority", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    name: str
    owner: str = Field(index=True)
    status: JobStatus = Field(default=JobStatus.queued)
    reason: Reason | None = None
    message: str | None = None
    exit_code: int | None = None
    priority: int = 0
    spec: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    gpu_count: int
    memory_mb: int | None = None
    assigned_gpus: list[int] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    attempt: int = 0
    wait_reason: str | None = None
    progress: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    metrics: dict[str, float] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    num_replicas: int | None = None
    gpu_memory_peak_mb: int | None = None
    log_tail: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    idempotency_key: str | None = Field(default=None, unique=True, index=True)
    runner_pid: int | None = None
    events_offset: int = 0
    cancel_requested_at: datetime | None = _utc(default=None)
    stop_reason: Reason | None = None  #: why the scheduler sent SIGTERM
    stop_sent_at: datetime | None = _utc(default=None)
    created_at: datetime = _utc(default_factory=utcnow)
    started_at: datetime | None = _utc(default=None)
    running_at: datetime | None = _utc(default=None)
    finished_at: datetime | None = _utc(default=None)


class JobMetric(SQLModel, table=True):
    """One epoch's metrics (`step` 0) or one sampled step's (`step` from 1).

    Unique per job and position, so a re-read event or a resumed epoch replaces its row.
    """

    __tablename__ = "job_metric"
    __table_args__ = (UniqueConstraint("job_id", "epoch", "step", name="uq_job_metric_position"),)

    id: int | None = Field(default=None, primary_key=True)
    job_id: int = Field(foreign_key="job.id", index=True)
    attempt: int
    epoch: int
    step: int = 0
    values: dict[str, float] = Field(sa_column=Column(JSON, nullable=False))
    recorded_at: datetime = _utc(default_factory=utcnow)


class Gpu(SQLModel, table=True):
    index: int = Field(primary_key=True)
    uuid: str
    name: str
    memory_total_mb: int
    simulated: bool = False


class Allocation(SQLModel, table=True):
    """A job's hold on one GPU; `memory_mb` is null for a whole (exclusive) GPU."""

    job_id: int = Field(foreign_key="job.id", primary_key=True)
    gpu_index: int = Field(foreign_key="gpu.index", primary_key=True)
    memory_mb: int | None = None


# --- public shapes -------------------------------------------------------------------------


class Progress(BaseModel):
    epoch: int | None = PydanticField(None, description="Current epoch, from 1.")
    epochs: int | None = None
    step: int | None = PydanticField(None, description="Step within the epoch, from 1.")
    steps: int | None = PydanticField(None, description="Steps per epoch.")
    fraction: float | None = PydanticField(None, description="Share of all training done, 0..1.")
    samples_per_s: float | None = None
    eta_s: float | None = PydanticField(None, description="Estimated seconds left.")


class JobPublic(BaseModel):
    id: int
    name: str
    owner: str
    status: JobStatus
    reason: Reason | None = PydanticField(description="Why the job ended, when it has.")
    message: str | None = PydanticField(description="A one-line explanation of `reason`.")
    exit_code: int | None
    priority: int
    spec: JobSpec
    assigned_gpus: list[int] = PydanticField(description="GPU indices; empty while queued.")
    memory_mb: int | None = PydanticField(description="Per-GPU cap; null for whole GPUs.")
    attempt: int
    wait_reason: str | None = PydanticField(description="Why a queued job is not running yet.")
    progress: Progress
    metrics: dict[str, float] = PydanticField(description="Latest metric values.")
    gpu_memory_peak_mb: int | None
    num_replicas: int | None = PydanticField(description="MirroredStrategy replicas in sync.")
    log_tail: list[str] = PydanticField(description="Last log lines of a failed job.")
    created_at: datetime
    started_at: datetime | None
    running_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def of(cls, job: Job) -> "JobPublic":
        data = job.model_dump()
        data["progress"] = Progress(**job.progress)
        return cls.model_validate(data)


class JobPage(BaseModel):
    jobs: list[JobPublic]
    next_cursor: str | None = PydanticField(description="Pass as `cursor` for the next page.")


class EpochMetrics(BaseModel):
    model_config = {"extra": "allow"}
    epoch: int


class StepMetrics(BaseModel):
    model_config = {"extra": "allow"}
    epoch: int
    step: int


class MetricHistory(BaseModel):
    epochs: list[EpochMetrics]
    steps: list[StepMetrics]


class AllocationPublic(BaseModel):
    job_id: int
    memory_mb: int | None = PydanticField(description="Declared cap; null for a whole GPU.")


class ForeignProcess(BaseModel):
    pid: int
    memory_mb: int


class GpuPublic(BaseModel):
    index: int
    uuid: str
    name: str
    memory_total_mb: int
    memory_used_mb: int
    memory_free_mb: int
    state: str = PydanticField(description="`free`, `in_use`, `draining` or `quarantined`.")
    simulated: bool
    allocations: list[AllocationPublic]
    foreign_processes: list[ForeignProcess]
