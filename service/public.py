"""The shapes the API returns (pydantic), built from the tables in `service.store.tables`."""

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Self

from pydantic import BaseModel, ValidationError
from pydantic import Field as PydanticField

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus, Reason
from gpuq.contract.sweep import SweepSpec
from service.gpus.states import GpuState
from service.store.db import utcnow
from service.store.tables import Job
from service.usage.efficiency import EFFICIENCY_FIELDS, efficiency
from service.usage.public import Efficiency


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
    preempted_by: int | None = PydanticField(
        None, description="The job whose start preempted it (reason `preempted`)."
    )
    lost_s: float | None = PydanticField(
        None,
        description="Seconds of its work no later attempt builds on: since its last epoch's "
        "checkpoint (or its start), for an attempt preempted or retried.",
    )


class NodePublic(BaseModel):
    rank: int = _d("The node's rank in the job: 0 is the chief, which writes the results.")
    node: str = _d("The node's name (Slurm's).")
    gpus: str | None = _d("Its GPUs, as Slurm gave them (`CUDA_VISIBLE_DEVICES` there).")


class JobEvent(BaseModel):
    """What changes while a job runs: the body of each `job` event in `GET /v1/events`."""

    id: int = _d("The job's id.")
    name: str = _d("The spec's `name`.")
    owner: str = _d("Who submitted the job.")
    status: JobStatus = _d("queued, starting, running, succeeded, failed, cancelled, timed_out.")
    reason: Reason | None = _d("Why the job ended, when it has.")
    message: str | None = _d("A one-line explanation of `reason`, with a hint.")
    exit_code: int | None = _d("The training process's exit code, when it exited.")
    exit_signal: int | None = _d("The signal that ended its program (9 for SIGKILL), if one did.")
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
    num_replicas: int | None = _d(
        "Replicas training in sync (MirroredStrategy), on all nodes together."
    )
    nodes: list[NodePublic] = PydanticField(
        default_factory=list,
        description="A job on several nodes (`resources.nodes`): each node and its GPUs, "
        "once all have started; empty for a job on one machine.",
    )
    executor: str | None = _d(
        "What runs the current attempt: `local` (this box) or `slurm`; null until handed over."
    )
    executor_job_id: str | None = _d(
        "The attempt's id there: the runner's process id on a box, the Slurm job id."
    )
    started_at: datetime | None = _d("Launched: the state became `starting` (UTC).")
    running_at: datetime | None = _d("The first training step was reported (UTC).")
    finished_at: datetime | None = _d("Reached its final state (UTC).")
    sweep_id: int | None = _d("The sweep this job is a member of; null for a job of its own.")
    revision: int = _d(
        "Grows whenever this job changes; pass it as `since` with `wait_s` to wait for the "
        "next change."
    )
    hidden: list[str] = PydanticField(
        default_factory=list,
        description="Fields of someone else's job left out for you, e.g. `log_tail`, `message` "
        "(then gpuq's words for its `reason` alone), `spec.command.env`: under "
        "GPUQ_RUN_AS=owner a job's run is its owner's and admins' only. Empty: all shown.",
    )

    @classmethod
    def of(cls, job: Job | Mapping[str, Any]) -> Self:
        """From a loaded job, or from its row as read without the ORM."""
        # Unwarned: what does not fit its column is read as absent (`_readable`) or refused.
        data = job.model_dump(warnings=False) if isinstance(job, Job) else dict(job)
        data.update(_readable(data))
        data["revision"] = data["rev"]
        return cls.model_validate(data)


def readable_progress(stored: Any) -> Progress:
    """A job's stored progress; empty if it does not fit (stored before events were
    checked)."""
    try:
        return Progress.model_validate(stored)
    except ValidationError:
        return Progress()


def _readable(data: Mapping[str, Any]) -> dict[str, Any]:
    """What a job's own events and exit set, with what does not fit read as absent: one
    bad value stored before they were checked must not fail a whole list of jobs."""
    return {
        "progress": readable_progress(data["progress"]),
        "metrics": readable_metrics(data["metrics"]),
        "num_replicas": data["num_replicas"] if _integer(data["num_replicas"]) else None,
        "nodes": _readable_nodes(data.get("nodes")),
        "exit_code": data["exit_code"] if _integer(data["exit_code"]) else None,
        "exit_signal": data["exit_signal"] if _integer(data["exit_signal"]) else None,
        "message": data["message"] if isinstance(data["message"], str) else None,
    }


def _readable_nodes(stored: Any) -> list[NodePublic]:
    try:
        return [NodePublic.model_validate(node) for node in stored or []]
    except (TypeError, ValidationError):
        return []


def readable_metrics(stored: Any) -> dict[str, Any]:
    """Stored metric values: numbers or null; anything else reads as absent (stored before
    events were checked)."""
    values = stored if isinstance(stored, dict) else {}
    return {k: v for k, v in values.items() if v is None or _number(v)}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class PlacementViolation(BaseModel):
    gpu: int = _d("The GPU the job's processes used without being given it.")
    pids: list[int] = _d("Its processes seen there.")
    memory_mb: int = _d("What they held there, in MiB.")


class JobPublic(JobEvent):
    priority: int = _d("Higher starts first.")
    spec: JobSpec = _d("The job spec as accepted, defaults filled in.")
    memory_mb: int | None = _d("Per-GPU cap in MiB; null for whole GPUs.")
    log_tail: list[str] = _d("The last log lines of a job that did not succeed.")
    warnings: list[str] = _d("Things gpuq noticed, e.g. GPU memory over the cap under `warn`.")
    placement_violations: list[PlacementViolation] = _d(
        "Each GPU the job was seen using without being given it (NVML)."
    )
    retry_at: datetime | None = _d("A job queued again for a retry waits until then (UTC).")
    previous_attempts: list[AttemptPublic] = _d("How each earlier attempt ended, oldest first.")
    held: bool = _d("Kept from starting until released (`POST .../release`).")
    unix_user: str | None = _d(
        "The Unix account the job runs as (GPUQ_RUN_AS=owner); null: gpuq's own account."
    )
    not_before: datetime | None = _d("The job does not start before this moment (UTC).")
    idle_since: datetime | None = _d(
        "Since when the job holds GPUs without training (the idle rule); null while it trains."
    )
    depends_on: list[int] = _d("Jobs that must succeed before this one starts.")
    created_at: datetime = _d("Submitted (UTC).")
    params: dict[str, Any] | None = _d(
        "A sweep member's parameters (its environment has each as `GPUQ_PARAM_<NAME>`)."
    )
    preemptions: int = _d(
        "How many times a more urgent job preempted it (GPUQ_PREEMPT); each attempt it lost "
        "is in `previous_attempts` with reason `preempted`."
    )
    preempted_by: int | None = _d("The job that preempted it last; null if none did.")
    efficiency: Efficiency | None = PydanticField(
        None,
        description="How it used what it asked for, as Slurm's `seff` tells it: GPU memory "
        "peak against its cap (and the cap to ask for), GPU utilisation, time against its "
        "limit; null until it starts.",
    )

    @classmethod
    def of(cls, job: Job | Mapping[str, Any]) -> Self:
        """From a loaded job, or from its row as read without the ORM, with its efficiency."""
        public = super().of(job)
        if isinstance(job, Mapping):
            fields = {name: job.get(name) for name in EFFICIENCY_FIELDS}
        else:
            fields = {name: getattr(job, name, None) for name in EFFICIENCY_FIELDS}
        public.efficiency = efficiency(fields, utcnow())
        return public


class VictimPublic(BaseModel):
    job_id: int = _d("The running job that would be preempted.")
    owner: str = _d("Its owner.")
    priority: int = _d("Its priority, lower than the waiting job's.")
    loses_s: float = _d("Seconds of its work since its last checkpoint, which it would redo.")


class Preview(BaseModel):
    would_start: bool = _d("True if the job would start right now.")
    assigned_gpus: list[int] = _d("The GPUs it would get now; empty if it would wait.")
    memory_mb: int | None = _d("Per-GPU cap in MiB; null for whole GPUs.")
    wait_reason: str | None = _d("Why it would wait, if it would.")
    jobs_ahead: int = _d("Queued jobs that would be considered before it.")
    would_preempt: list[VictimPublic] = PydanticField(
        default_factory=list,
        description="Running jobs it would stop to start now (GPUQ_PREEMPT=priority).",
    )


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


class GpuNodePublic(BaseModel):
    """A GPU node of the Slurm partition (`GPUQ_EXECUTOR=slurm`), from `sinfo`."""

    node: str = _d("Slurm's node name.")
    gpus: int = _d("GPUs the node has (its `gpu` GRES).")
    gpus_allocated: int = _d("GPUs Slurm has given to jobs.")
    gpus_free: int = _d("GPUs neither allocated nor on a node that is down or drained.")
    state: str = _d("Slurm's node state: idle, mixed, allocated, down, drained...")


class MaintenancePublic(BaseModel):
    reason: str | None = _d("Why, in the admin's words.")
    by: str = _d("The admin who drained it.")
    since: datetime = _d("Drained since (UTC).")


class DrainPublic(BaseModel):
    """An admin's maintenance drain: nothing new starts there until it is resumed."""

    gpu: int | None = _d("The GPU drained; null: the whole box.")
    reason: str | None = _d("Why, in the admin's words.")
    by: str = _d("The admin who drained it.")
    since: datetime = _d("Drained since (UTC).")


class GpuPublic(BaseModel):
    index: int = _d("NVML index, as used in CUDA_VISIBLE_DEVICES (PCI bus order).")
    uuid: str = _d("NVML UUID.")
    name: str = _d("Model name.")
    memory_total_mb: int = _d("Total memory in MiB.")
    memory_used_mb: int = _d("Used memory in MiB (NVML; declared caps on simulated GPUs).")
    memory_free_mb: int = _d("Free memory in MiB.")
    state: GpuState = _d("`free`, `in_use`, `draining` or `quarantined`.")
    state_reason: str | None = _d("Why a GPU is draining or quarantined.")
    utilization_pct: int | None = _d("GPU utilisation in percent (NVML; null when unknown).")
    simulated: bool = _d("True for GPUs simulated with CPU devices (`GPUQ_GPUS=sim:...`).")
    allocations: list[AllocationPublic] = _d("Jobs placed on this GPU.")
    foreign_processes: list[ForeignProcess] = _d("Processes gpuq did not start, with memory.")
    maintenance: MaintenancePublic | None = PydanticField(
        None,
        description="The admin's drain of this GPU (or of the whole box): no new job starts "
        "on it until resumed; null: not drained.",
    )


class WebhookPublic(BaseModel):
    url: str | None = _d("Your default webhook, for jobs whose spec names none; null: none.")
    secret: str = _d(
        "Signs every delivery to your jobs' webhooks: `X-Gpuq-Signature: sha256=<hex>` is "
        "HMAC-SHA256 of the body with this key."
    )


class DeliveryAttemptPublic(BaseModel):
    at: datetime = _d("When the POST was sent (UTC).")
    status_code: int | None = _d("The receiver's HTTP status; null if none came.")
    error: str | None = _d(
        "Why no answer came, coarsely: `could not connect`, `timed out`, `no answer`, or "
        "`refused: address not allowed (GPUQ_WEBHOOK_ALLOW)`."
    )
    duration_ms: int | None = _d("How long the answer took, in milliseconds; null if none came.")


class WebhookDeliveryPublic(BaseModel):
    id: int = _d("The delivery's id, also sent as `X-Gpuq-Delivery`.")
    event: str = _d("The job's new status (`running`, `succeeded`, ...) or `idle`.")
    url: str = _d("Where it is posted.")
    state: str = _d("`pending` (to be tried), `delivered` (a 2xx answer) or `failed`.")
    attempts: list[DeliveryAttemptPublic] = _d("Each try, oldest first.")
    next_at: datetime | None = _d("When the next try is due (UTC); null unless pending.")
    created_at: datetime = _d("When the change was noticed (UTC).")
    finished_at: datetime | None = _d("When it was delivered or given up (UTC).")


class WebhookDeliveryList(BaseModel):
    job_id: int = _d("The job.")
    deliveries: list[WebhookDeliveryPublic] = _d("The newest (at most 200), newest first.")


class SweepMember(BaseModel):
    job_id: int = _d("The member's job id: its logs, metrics and artifacts are a job's.")
    name: str = _d("The job's name: the sweep's, numbered.")
    params: dict[str, Any] = _d("The values this member was given.")
    status: JobStatus = _d("The job's state.")
    reason: Reason | None = _d("Why it ended: `early_stopped` if the stopping rule stopped it.")
    message: str | None = _d("The job's one-line explanation of `reason`.")
    held: bool = _d("Kept from starting until the sweep (or the job) is released.")
    epochs: int = _d("Epochs it reported.")
    best: float | None = _d("Its best value of the sweep's metric; null before any.")
    last: float | None = _d("Its latest value of the metric.")
    rank: int | None = _d("1 for the best member by `best`; null while it has no value.")
    started_at: datetime | None = _d("Launched (UTC).")
    finished_at: datetime | None = _d("Ended (UTC).")


class SweepBest(BaseModel):
    job_id: int = _d("The best member so far.")
    params: dict[str, Any] = _d("Its parameters.")
    value: float = _d("Its best value of the metric.")


class SweepSummary(BaseModel):
    id: int = _d("The sweep's id.")
    name: str = _d("The spec's `name`; members are named NAME-1, NAME-2, ...")
    owner: str = _d("Who submitted it; it owns every member.")
    priority: int = _d("Every member's priority.")
    status: str = _d(
        "`queued` (no member started yet), `running` (members run or wait their turn), "
        "`ended` (every member ended), `cancelled` (cancelled, every member ended)."
    )
    held: bool = _d("Its queued members are held (`POST .../release` lets them start).")
    size: int = _d("How many members it made.")
    counts: dict[str, int] = _d('Members by state: `{"queued": 2, "running": 2, ...}`.')
    metric: str | None = _d("The metric that ranks members.")
    mode: str = _d("`min` or `max`: which way the metric is better.")
    max_parallel: int | None = _d("At most this many members run at once.")
    spec: SweepSpec = _d("The sweep as accepted (a random search's `seed` filled in).")
    warnings: list[str] = _d("Things gpuq noticed, e.g. a metric no member reports.")
    cancelled_by: str | None = _d("Who cancelled it, if anyone did.")
    created_at: datetime = _d("Submitted (UTC).")
    finished_at: datetime | None = _d("When its last member ended (UTC), once all have.")
    hidden: list[str] = PydanticField(
        default_factory=list,
        description="Fields of someone else's sweep left out for you, as its members' are: "
        "`spec.webhook`; under GPUQ_RUN_AS=owner also e.g. `spec.command.env`, "
        "`spec.idle_exempt`, `members.message` (then gpuq's words for its `reason` alone). "
        "Empty: all shown.",
    )


class SweepPublic(SweepSummary):
    best: SweepBest | None = _d("The member on top of the leaderboard, and its parameters.")
    members: list[SweepMember] = _d("The leaderboard: the best member first.")


class SweepPage(BaseModel):
    sweeps: list[SweepSummary] = _d("This page of sweeps, newest first (no leaderboards).")
    next_cursor: str | None = _d("Pass as `cursor` for the next page; null on the last.")


class SweepCurve(BaseModel):
    job_id: int = _d("The member.")
    params: dict[str, Any] = _d("Its parameters.")
    status: JobStatus = _d("Its state.")
    epochs: list[int] = _d("The epochs that reported the metric.")
    values: list[float | None] = _d("The metric at each of them (null: not a number).")


class SweepCurves(BaseModel):
    metric: str | None = _d("The sweep's metric.")
    members: list[SweepCurve] = _d("Every member's curve, in member order.")
