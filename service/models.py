"""Database tables and the public shapes the API returns."""

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Self

from pydantic import BaseModel
from pydantic import Field as PydanticField
from sqlalchemy import JSON, Column, Index, UniqueConstraint
from sqlmodel import Field, SQLModel

from service.db import UTCDateTime, utcnow
from service.spec import JobSpec, empty_dict, empty_list
from service.states import JobStatus, Reason


def _utc(**kwargs: Any) -> Any:
    return Field(sa_type=UTCDateTime, **kwargs)


class Job(SQLModel, table=True):
    __table_args__ = (
        Index("ix_job_status_priority", "status", "priority", "id"),
        Index("ix_job_status_id", "status", "id"),
        Index("ix_job_finished_at", "finished_at"),
    )

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
    assigned_gpus: list[int] = Field(
        default_factory=empty_list, sa_column=Column(JSON, nullable=False)
    )
    attempt: int = 0
    wait_reason: str | None = None
    progress: dict[str, Any] = Field(
        default_factory=empty_dict, sa_column=Column(JSON, nullable=False)
    )
    metrics: dict[str, float | None] = Field(
        default_factory=empty_dict, sa_column=Column(JSON, nullable=False)
    )
    num_replicas: int | None = None
    gpu_memory_peak_mb: int | None = None
    log_tail: list[str] = Field(default_factory=empty_list, sa_column=Column(JSON, nullable=False))
    warnings: list[str] = Field(default_factory=empty_list, sa_column=Column(JSON, nullable=False))
    retry_at: datetime | None = _utc(default=None)  #: a requeued job waits until then
    held: bool = False  #: kept from starting by its owner or an admin
    depends_on: list[int] = Field(
        default_factory=empty_list, sa_column=Column(JSON, nullable=False)
    )
    queue_position: int | None = None  #: 1 for the next queued job to be considered
    previous_attempts: list[dict[str, Any]] = Field(
        default_factory=empty_list, sa_column=Column(JSON, nullable=False)
    )
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
    #: Grows on every change to any job (kept by database triggers; see migration 0005).
    rev: int = Field(default=0, unique=True, index=True)


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
    values: dict[str, float | None] = Field(sa_column=Column(JSON, nullable=False))
    recorded_at: datetime = _utc(default_factory=utcnow)


class Gpu(SQLModel, table=True):
    index: int = Field(primary_key=True)
    uuid: str
    name: str
    memory_total_mb: int
    simulated: bool = False
    #: `draining` after a job ended, until its processes and memory are gone; then
    #: `quarantined` if they stay. Null when the GPU can be placed on.
    hold: str | None = None
    hold_reason: str | None = None
    hold_job_id: int | None = None
    hold_pids: list[int] = Field(default_factory=empty_list, sa_column=Column(JSON, nullable=False))
    hold_since: datetime | None = _utc(default=None)


class User(SQLModel, table=True):
    """A team member; the token itself is never stored, only its SHA-256."""

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(unique=True, index=True)
    token_sha256: str
    admin: bool = False
    created_at: datetime = _utc(default_factory=utcnow)
    revoked_at: datetime | None = _utc(default=None)


class AuditEntry(SQLModel, table=True):
    """One mutation: who did what to which job, GPU or user."""

    __tablename__ = "audit"

    id: int | None = Field(default=None, primary_key=True)
    at: datetime = _utc(default_factory=utcnow)
    actor: str
    action: str
    target: str
    detail: dict[str, Any] = Field(
        default_factory=empty_dict, sa_column=Column(JSON, nullable=False)
    )


class Allocation(SQLModel, table=True):
    """A job's hold on one GPU; `memory_mb` is null for a whole (exclusive) GPU."""

    job_id: int = Field(foreign_key="job.id", primary_key=True)
    gpu_index: int = Field(foreign_key="gpu.index", primary_key=True)
    memory_mb: int | None = None


# --- public shapes -------------------------------------------------------------------------


class Progress(BaseModel):
    epoch: int | None = PydanticField(None, description="Current epoch, from 1.")
    epochs: int | None = PydanticField(None, description="Epochs in all.")
    step: int | None = PydanticField(None, description="Step within the epoch, from 1.")
    steps: int | None = PydanticField(None, description="Steps per epoch.")
    fraction: float | None = PydanticField(None, description="Share of all training done, 0..1.")
    samples_per_s: float | None = PydanticField(
        None, description="Training throughput in the current epoch (all replicas together)."
    )
    eta_s: float | None = PydanticField(None, description="Estimated seconds left.")


def _d(description: str) -> Any:
    return PydanticField(description=description)


class AttemptPublic(BaseModel):
    attempt: int = _d("Attempt number, from 1.")
    reason: Reason | None = _d("Why it ended.")
    message: str | None = _d("The one-line explanation.")
    exit_code: int | None = _d("Its exit code, if it exited.")
    last_epoch: int | None = _d("The last epoch it reported.")
    finished_at: datetime = _d("When it ended (UTC).")


class JobEvent(BaseModel):
    """What changes while a job runs: the body of each `job` event in `GET /v1/events`."""

    id: int = _d("The job's id.")
    name: str = _d("The spec's `name`.")
    owner: str = _d("Who submitted the job.")
    status: JobStatus = _d("queued, starting, running, succeeded, failed, cancelled, timed_out.")
    reason: Reason | None = _d("Why the job ended, when it has.")
    message: str | None = _d("A one-line explanation of `reason`, with a hint.")
    exit_code: int | None = _d("The training process's exit code, when it exited.")
    assigned_gpus: list[int] = _d("GPU indices; empty while queued.")
    attempt: int = _d("Attempt number, from 1 once launched; 0 while never launched.")
    wait_reason: str | None = _d("Why a queued job is not running yet.")
    queue_position: int | None = _d(
        "Place in the queue (1 = considered next), brought up to date within 2 s; null unless "
        "queued."
    )
    progress: Progress = _d("Where training is.")
    metrics: dict[str, float | None] = _d("Latest metric values (null for NaN or infinity).")
    gpu_memory_peak_mb: int | None = _d("Highest GPU memory seen per GPU, in MiB (real GPUs).")
    num_replicas: int | None = _d("MirroredStrategy replicas in sync.")
    started_at: datetime | None = _d("Launched: the state became `starting` (UTC).")
    running_at: datetime | None = _d("The first training step was reported (UTC).")
    finished_at: datetime | None = _d("Reached its final state (UTC).")
    revision: int = _d(
        "Grows whenever this job changes; pass it as `since` with `wait_s` to wait for the "
        "next change."
    )

    @classmethod
    def of(cls, job: Job | Mapping[str, Any]) -> Self:
        """From a loaded job, or from its row as read without the ORM."""
        data = job.model_dump() if isinstance(job, Job) else dict(job)
        data["progress"] = Progress(**data["progress"])
        data["revision"] = data["rev"]
        return cls.model_validate(data)


class JobPublic(JobEvent):
    priority: int = _d("Higher starts first.")
    spec: JobSpec = _d("The job spec as accepted, defaults filled in.")
    memory_mb: int | None = _d("Per-GPU cap in MiB; null for whole GPUs.")
    log_tail: list[str] = _d("The last log lines of a job that did not succeed.")
    warnings: list[str] = _d("Things gpuq noticed, e.g. GPU memory over the cap under `warn`.")
    retry_at: datetime | None = _d("A job queued again for a retry waits until then (UTC).")
    previous_attempts: list[AttemptPublic] = _d("How each earlier attempt ended, oldest first.")
    held: bool = _d("Kept from starting until released (`POST .../release`).")
    depends_on: list[int] = _d("Jobs that must succeed before this one starts.")
    created_at: datetime = _d("Submitted (UTC).")


class Preview(BaseModel):
    would_start: bool = _d("True if the job would start right now.")
    assigned_gpus: list[int] = _d("The GPUs it would get now; empty if it would wait.")
    memory_mb: int | None = _d("Per-GPU cap in MiB; null for whole GPUs.")
    wait_reason: str | None = _d("Why it would wait, if it would.")
    jobs_ahead: int = _d("Queued jobs that would be considered before it.")


class AuditPublic(BaseModel):
    id: int = _d("Entry id, increasing.")
    at: datetime = _d("When (UTC).")
    actor: str = _d("Who did it.")
    action: str = _d("What: submit, cancel, hold, release, priority, gpu_release, ...")
    target: str = _d("What it was done to: `job/7`, `gpu/0`, `user/ana`.")
    detail: dict[str, Any] = _d("More about it, e.g. the old and new priority.")


class AuditPage(BaseModel):
    entries: list[AuditPublic] = _d("Newest first.")
    next_cursor: str | None = _d("Pass as `cursor` for the next page; null on the last.")


class JobPage(BaseModel):
    jobs: list[JobPublic] = _d("This page of jobs, newest first.")
    next_cursor: str | None = _d("Pass as `cursor` for the next page; null on the last.")


class EpochMetrics(BaseModel):
    model_config = {"extra": "allow"}
    epoch: int = _d("Epoch, from 1; the other keys are the metrics (loss, val_loss, ...).")


class StepMetrics(BaseModel):
    model_config = {"extra": "allow"}
    epoch: int = _d("Epoch, from 1.")
    step: int = _d("Step within the epoch, from 1; the other keys are the metrics.")


class MetricHistory(BaseModel):
    epochs: list[EpochMetrics] = _d("One entry per completed epoch.")
    steps: list[StepMetrics] = _d("Sampled steps (about one a second).")


class ArtifactPublic(BaseModel):
    name: str = _d("Path under the job's folders: `model.keras`, `checkpoints/...`, ...")
    size_bytes: int = _d("Size in bytes.")
    modified_at: datetime = _d("Last written (UTC).")


class ArtifactList(BaseModel):
    job_id: int = _d("The job.")
    attempt: int = _d("The attempt these files belong to (0: never launched, no files).")
    artifacts: list[ArtifactPublic] = _d("Files by name; download one at `.../artifacts/{name}`.")


class AllocationPublic(BaseModel):
    job_id: int = _d("The job holding part or all of this GPU.")
    memory_mb: int | None = _d("Declared cap in MiB; null for a whole GPU.")


class ForeignProcess(BaseModel):
    pid: int = _d("Process id on the host.")
    memory_mb: int = _d("GPU memory it holds, in MiB.")


class GpuPublic(BaseModel):
    index: int = _d("NVML index, as used in CUDA_VISIBLE_DEVICES (PCI bus order).")
    uuid: str = _d("NVML UUID.")
    name: str = _d("Model name.")
    memory_total_mb: int = _d("Total memory in MiB.")
    memory_used_mb: int = _d("Used memory in MiB (NVML; declared caps on simulated GPUs).")
    memory_free_mb: int = _d("Free memory in MiB.")
    state: str = _d("`free`, `in_use`, `draining` or `quarantined`.")
    state_reason: str | None = _d("Why a GPU is draining or quarantined.")
    utilization_pct: int | None = _d("GPU utilisation in percent (NVML; null when unknown).")
    simulated: bool = _d("True for GPUs simulated with CPU devices (`GPUQ_GPUS=sim:...`).")
    allocations: list[AllocationPublic] = _d("Jobs placed on this GPU.")
    foreign_processes: list[ForeignProcess] = _d("Processes gpuq did not start, with memory.")
