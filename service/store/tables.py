"""The database tables (SQLModel); `service.public` has the shapes the API returns."""

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Column, Index, UniqueConstraint
from sqlmodel import Field, SQLModel

from gpuq.contract.spec import empty_dict, empty_list
from gpuq.contract.states import GpuState, JobStatus, Reason
from service.store.db import utc_field, utcnow


class Job(SQLModel, table=True):
    __table_args__ = (
        Index("ix_job_status_priority", "status", "priority", "id"),
        Index("ix_job_status_id", "status", "id"),
        Index("ix_job_status_rev", "status", "rev"),  # the scheduler's `replan.fingerprint`
        Index("ix_job_finished_at", "finished_at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    name: str
    owner: str = Field(index=True)
    status: JobStatus = Field(default=JobStatus.queued)
    reason: Reason | None = None
    message: str | None = None
    exit_code: int | None = None
    exit_signal: int | None = None  #: the signal that ended its program, if one did
    priority: int = 0
    spec: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    gpu_count: int
    memory_mb: int | None = None
    #: the CPU cores and host memory (MiB) it got, per node: its spec's, else the site's
    #: defaults, resolved at submit; None: none asked and no default applies
    cpus: float | None = None
    host_memory_mb: int | None = None
    assigned_gpus: list[int] = Field(
        default_factory=empty_list, sa_column=Column(JSON, nullable=False)
    )
    attempt: int = 0
    wait_reason: str | None = None
    #: why its latest attempt got its GPUs, as the plan said: "GPU 1: idle"
    placement: str | None = None
    #: the memory of its latest attempt's GPUs (the smallest), MiB: what a whole-GPU job's
    #: peak is measured against
    gpu_memory_total_mb: int | None = None
    progress: dict[str, Any] = Field(
        default_factory=empty_dict, sa_column=Column(JSON, nullable=False)
    )
    metrics: dict[str, float | None] = Field(
        default_factory=empty_dict, sa_column=Column(JSON, nullable=False)
    )
    num_replicas: int | None = None
    #: a job on several nodes: `{"rank", "node", "gpus"}` for each, as they announced it
    nodes: list[dict[str, Any]] = Field(
        default_factory=empty_list, sa_column=Column(JSON, nullable=False)
    )
    gpu_memory_peak_mb: int | None = None
    #: measured by its fence when an attempt ends: peak host memory (MiB), CPU time (s)
    host_memory_peak_mb: int | None = None
    cpu_time_s: float | None = None
    log_tail: list[str] = Field(default_factory=empty_list, sa_column=Column(JSON, nullable=False))
    warnings: list[str] = Field(default_factory=empty_list, sa_column=Column(JSON, nullable=False))
    #: `{"gpu", "pids", "memory_mb"}` for each GPU a job's processes used without being given it
    placement_violations: list[dict[str, Any]] = Field(
        default_factory=empty_list, sa_column=Column(JSON, nullable=False)
    )
    retry_at: datetime | None = utc_field(default=None)  #: a requeued job waits until then
    held: bool = False  #: kept from starting by its owner or an admin
    depends_on: list[int] = Field(
        default_factory=empty_list, sa_column=Column(JSON, nullable=False)
    )
    queue_position: int | None = None  #: 1 for the next queued job to be considered
    previous_attempts: list[dict[str, Any]] = Field(
        default_factory=empty_list, sa_column=Column(JSON, nullable=False)
    )
    idempotency_key: str | None = Field(default=None, unique=True, index=True)
    #: the Unix account the job runs as (GPUQ_RUN_AS=owner), fixed at submit
    unix_user: str | None = None
    not_before: datetime | None = utc_field(default=None)  #: the spec's: no start before then
    #: since when the job holds GPUs without training (the idle rule); None while it trains
    idle_since: datetime | None = utc_field(default=None)
    webhook_url: str | None = None  #: where its state changes are posted, fixed at submit
    #: the last status a webhook delivery was queued for (the notifier's cursor)
    notified_status: str | None = None
    runner_pid: int | None = None  #: leads the job's process group on this box (local)
    executor: str | None = None  #: what runs the current attempt: `local` or `slurm`
    executor_job_id: str | None = None  #: its id there: the runner's pid, the Slurm job id
    events_offset: int = 0
    cancel_requested_at: datetime | None = utc_field(default=None)
    stop_reason: Reason | None = None  #: why the scheduler sent SIGTERM
    stop_sent_at: datetime | None = utc_field(default=None)
    created_at: datetime = utc_field(default_factory=utcnow)
    started_at: datetime | None = utc_field(default=None)
    running_at: datetime | None = utc_field(default=None)
    finished_at: datetime | None = utc_field(default=None)
    #: Grows on every change to any job (kept by database triggers; see migration 0005).
    rev: int = Field(default=0, unique=True, index=True)
    sweep_id: int | None = Field(default=None, index=True)  #: the sweep it is a member of
    #: a sweep member's parameters: name → value (`GPUQ_PARAM_<NAME>` in its environment)
    params: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    #: when its current attempt became free to start: its retry's time (None: `created_at`)
    queued_at: datetime | None = utc_field(default=None)
    preemptions: int = 0  #: how many times a more urgent job preempted it
    preempted_by: int | None = None  #: the job that preempted it last
    #: its GPUs' average utilisation over NVML's samples while it ran (None: none known)
    gpu_util_avg_pct: float | None = None
    gpu_util_samples: int = 0


class Sweep(SQLModel, table=True):
    """Many runs of one experiment: its members are ordinary jobs (`Job.sweep_id`)."""

    id: int | None = Field(default=None, primary_key=True)
    name: str
    owner: str = Field(index=True)
    priority: int = 0
    spec: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))  #: as accepted
    size: int  #: how many members it made
    max_parallel: int | None = None  #: at most this many members run at once
    held: bool = False  #: its queued members were held (and not released since)
    cancelled_at: datetime | None = utc_field(default=None)
    cancelled_by: str | None = None
    warnings: list[str] = Field(default_factory=empty_list, sa_column=Column(JSON, nullable=False))
    idempotency_key: str | None = Field(default=None, unique=True, index=True)
    created_at: datetime = utc_field(default_factory=utcnow)


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
    recorded_at: datetime = utc_field(default_factory=utcnow)


class Gpu(SQLModel, table=True):
    index: int = Field(primary_key=True)
    uuid: str
    name: str
    memory_total_mb: int
    simulated: bool = False
    #: The stored part of its lifecycle (`gpus.states`): `free`, `draining` after a job
    #: ended until its processes and memory are gone, `quarantined` if they stay. A free
    #: GPU with allocations shows as `in_use`. Changed only by `registry.change_state`.
    state: GpuState = Field(default=GpuState.free)
    state_reason: str | None = None
    state_since: datetime | None = utc_field(default=None)
    drain_job_id: int | None = None  #: the job whose end it is draining after
    #: processes seen holding memory here while that job ran (a dead pid's memory lingers)
    drain_pids: list[int] = Field(
        default_factory=empty_list, sa_column=Column(JSON, nullable=False)
    )


class User(SQLModel, table=True):
    """A team member; the token itself is never stored, only its SHA-256."""

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(unique=True, index=True)
    token_sha256: str
    admin: bool = False
    unix_user: str | None = None  #: the Unix account their jobs run as (GPUQ_RUN_AS=owner)
    created_at: datetime = utc_field(default_factory=utcnow)
    revoked_at: datetime | None = utc_field(default=None)


class Revision(SQLModel, table=True):
    """A counter that triggers raise on every change to what it is named for (`users`: the
    user table), so a cache of that is read again only when it changed (`Database.cached`)."""

    name: str = Field(primary_key=True)
    value: int = Field(default=0, sa_column_kwargs={"server_default": "0"})


class AuditEntry(SQLModel, table=True):
    """One mutation: who did what to which job, GPU or user."""

    __tablename__ = "audit"

    id: int | None = Field(default=None, primary_key=True)
    at: datetime = utc_field(default_factory=utcnow)
    actor: str
    action: str
    target: str
    detail: dict[str, Any] = Field(
        default_factory=empty_dict, sa_column=Column(JSON, nullable=False)
    )


class Allocation(SQLModel, table=True):
    """A job's claim on one GPU; `memory_mb` is null for a whole (exclusive) GPU."""

    job_id: int = Field(foreign_key="job.id", primary_key=True)
    gpu_index: int = Field(foreign_key="gpu.index", primary_key=True)
    memory_mb: int | None = None


class Maintenance(SQLModel, table=True):
    """An admin's drain: of one GPU (`gpu_index`) or of the whole box (`gpu_index` None).
    Nothing new starts there until it is resumed (the row deleted)."""

    id: int | None = Field(default=None, primary_key=True)
    gpu_index: int | None = None
    reason: str | None = None
    actor: str
    since: datetime = utc_field(default_factory=utcnow)


class UserWebhook(SQLModel, table=True):
    """A job owner's webhook default and the secret their deliveries are signed with."""

    __tablename__ = "user_webhook"

    owner: str = Field(primary_key=True)
    url: str | None = None  #: for jobs that name no `webhook` of their own
    secret: str


class WebhookDelivery(SQLModel, table=True):
    """One notification of one job's change, and every attempt to deliver it."""

    __tablename__ = "webhook_delivery"
    __table_args__ = (Index("ix_webhook_delivery_state_next", "state", "next_at"),)

    id: int | None = Field(default=None, primary_key=True)
    job_id: int = Field(index=True)
    owner: str
    event: str  #: the job's new status, or `idle`
    url: str
    body: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    state: str = "pending"  #: `pending`, `delivered` or `failed` (no attempts left)
    #: `{"at", "status_code", "error", "duration_ms"}` for each try, oldest first
    attempts: list[dict[str, Any]] = Field(
        default_factory=empty_list, sa_column=Column(JSON, nullable=False)
    )
    next_at: datetime | None = utc_field(default=None)  #: when to try next (pending only)
    created_at: datetime = utc_field(default_factory=utcnow)
    finished_at: datetime | None = utc_field(default=None)
