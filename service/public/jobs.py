"""A job as the API shows it: `JobEvent` (what changes while it runs), `JobPublic` (all of
it) and a page of them, read leniently from what its own events and exit stored."""

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Self

from pydantic import BaseModel, ValidationError
from pydantic import Field as PydanticField

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus, Reason
from service.store.db import utcnow
from service.store.tables import Job
from service.usage.efficiency import EFFICIENCY_FIELDS, efficiency
from service.usage.public import Efficiency, described


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


class AttemptPublic(BaseModel):
    attempt: int = described("Attempt number, from 1.")
    reason: Reason | None = described("Why it ended.")
    message: str | None = described("The one-line explanation.")
    exit_code: int | None = described("Its exit code, if it exited.")
    last_epoch: int | None = described("The last epoch it reported.")
    finished_at: datetime = described("When it ended (UTC).")
    preempted_by: int | None = PydanticField(
        None, description="The job whose start preempted it (reason `preempted`)."
    )
    lost_s: float | None = PydanticField(
        None,
        description="Seconds of its work no later attempt builds on: since its last epoch's "
        "checkpoint (or its start), for an attempt preempted or retried.",
    )


class NodePublic(BaseModel):
    rank: int = described("The node's rank in the job: 0 is the chief, which writes the results.")
    node: str = described("The node's name (Slurm's).")
    gpus: str | None = described("Its GPUs, as Slurm gave them (`CUDA_VISIBLE_DEVICES` there).")


class JobEvent(BaseModel):
    """What changes while a job runs: the body of each `job` event in `GET /v1/events`."""

    id: int = described("The job's id.")
    name: str = described("The spec's `name`.")
    owner: str = described("Who submitted the job.")
    status: JobStatus = described(
        "queued, starting, running, succeeded, failed, cancelled, timed_out."
    )
    reason: Reason | None = described("Why the job ended, when it has.")
    message: str | None = described("A one-line explanation of `reason`, with a hint.")
    exit_code: int | None = described("The training process's exit code, when it exited.")
    exit_signal: int | None = described(
        "The signal that ended its program (9 for SIGKILL), if one did."
    )
    assigned_gpus: list[int] = described("GPU indices; empty while queued.")
    attempt: int = described("Attempt number, from 1 once launched; 0 while never launched.")
    wait_reason: str | None = described("Why a queued job is not running yet.")
    placement: str | None = described(
        "Why its latest attempt got its GPUs, as the plan said (GPUQ_PLACEMENT): `GPU 1: "
        "idle`, `GPU 0: beside job 7; packed to keep GPU 1 whole for job 12`."
    )
    queue_position: int | None = described(
        "Place in the queue (1 = considered next), brought up to date within 2 s; null unless "
        "queued."
    )
    progress: Progress = described("Where training is.")
    metrics: dict[str, float | None] = described("Latest metric values (null for NaN or infinity).")
    gpu_memory_peak_mb: int | None = described(
        "Highest GPU memory seen per GPU, in MiB (real GPUs)."
    )
    host_memory_peak_mb: int | None = described(
        "Highest host memory its processes held together, in MiB, as its fence measured it "
        "when its latest attempt ended; null until then, or where it ran unfenced."
    )
    cpu_time_s: float | None = described(
        "CPU time its processes used (all cores together), in seconds, measured likewise."
    )
    num_replicas: int | None = described(
        "Replicas training in sync (MirroredStrategy), on all nodes together."
    )
    nodes: list[NodePublic] = PydanticField(
        default_factory=list,
        description="A job on several nodes (`resources.nodes`): each node and its GPUs, "
        "once all have started; empty for a job on one machine.",
    )
    executor: str | None = described(
        "What runs the current attempt: `local` (this box) or `slurm`; null until handed over."
    )
    executor_job_id: str | None = described(
        "The attempt's id there: the runner's process id on a box, the Slurm job id."
    )
    started_at: datetime | None = described("Launched: the state became `starting` (UTC).")
    running_at: datetime | None = described("The first training step was reported (UTC).")
    finished_at: datetime | None = described("Reached its final state (UTC).")
    sweep_id: int | None = described(
        "The sweep this job is a member of; null for a job of its own."
    )
    revision: int = described(
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
        "num_replicas": data["num_replicas"] if _is_integer(data["num_replicas"]) else None,
        "nodes": _readable_nodes(data.get("nodes")),
        "exit_code": data["exit_code"] if _is_integer(data["exit_code"]) else None,
        "exit_signal": data["exit_signal"] if _is_integer(data["exit_signal"]) else None,
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
    return {k: v for k, v in values.items() if v is None or _is_number(v)}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class PlacementViolation(BaseModel):
    gpu: int = described("The GPU the job's processes used without being given it.")
    pids: list[int] = described("Its processes seen there.")
    memory_mb: int = described("What they held there, in MiB.")


class JobPublic(JobEvent):
    priority: int = described("Higher starts first.")
    spec: JobSpec = described("The job spec as accepted, defaults filled in.")
    memory_mb: int | None = described("Per-GPU cap in MiB; null for whole GPUs.")
    cpus: float | None = described(
        "CPU cores it got (per node): its spec's `resources.cpus`, else the site's default "
        "(GPUQ_DEFAULT_CPUS_PER_GPU, GPUQ_DEFAULT_CPUS). Null: none asked and no default: it "
        "holds no cores and is kept only to the box's."
    )
    host_memory_mb: int | None = described(
        "Host memory it got in MiB (per node): its spec's `resources.host_memory_mb`, else "
        "the site's default. Null: none asked and no default: it holds none and may use the "
        "box's less gpuq's reserve (GPUQ_RESERVED_HOST_MEMORY_MB)."
    )
    log_tail: list[str] = described("The last log lines of a job that did not succeed.")
    warnings: list[str] = described(
        "Things gpuq noticed, e.g. GPU memory over the cap under `warn`."
    )
    placement_violations: list[PlacementViolation] = described(
        "Each GPU the job was seen using without being given it (NVML)."
    )
    retry_at: datetime | None = described("A job queued again for a retry waits until then (UTC).")
    previous_attempts: list[AttemptPublic] = described(
        "How each earlier attempt ended, oldest first."
    )
    held: bool = described("Kept from starting until released (`POST .../release`).")
    unix_user: str | None = described(
        "The Unix account the job runs as (GPUQ_RUN_AS=owner); null: gpuq's own account."
    )
    not_before: datetime | None = described("The job does not start before this moment (UTC).")
    idle_since: datetime | None = described(
        "Since when the job holds GPUs without training (the idle rule); null while it trains."
    )
    depends_on: list[int] = described("Jobs that must succeed before this one starts.")
    created_at: datetime = described("Submitted (UTC).")
    params: dict[str, Any] | None = described(
        "A sweep member's parameters (its environment has each as `GPUQ_PARAM_<NAME>`)."
    )
    preemptions: int = described(
        "How many times a more urgent job preempted it (GPUQ_PREEMPT); each attempt it lost "
        "is in `previous_attempts` with reason `preempted`."
    )
    preempted_by: int | None = described("The job that preempted it last; null if none did.")
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


class JobPage(BaseModel):
    jobs: list[JobPublic] = described("This page of jobs, newest first.")
    next_cursor: str | None = described("Pass as `cursor` for the next page; null on the last.")
