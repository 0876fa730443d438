"""A dry run's answer (a submission with `dry_run`): whether the job would start now, and
whom it would preempt."""

from pydantic import BaseModel
from pydantic import Field as PydanticField

from service.usage.public import described


class VictimPublic(BaseModel):
    job_id: int = described("The running job that would be preempted.")
    owner: str = described("Its owner.")
    priority: int = described("Its priority, lower than the waiting job's.")
    loses_s: float = described(
        "Seconds of its work since its last checkpoint, which it would redo."
    )


class Preview(BaseModel):
    would_start: bool = described("True if the job would start right now.")
    assigned_gpus: list[int] = described("The GPUs it would get now; empty if it would wait.")
    memory_mb: int | None = described("Per-GPU cap in MiB; null for whole GPUs.")
    wait_reason: str | None = described("Why it would wait, if it would.")
    placement: str | None = described(
        "Why it would get those GPUs (GPUQ_PLACEMENT), if it would start: `GPU 1: idle`."
    )
    jobs_ahead: int = described("Queued jobs that would be considered before it.")
    would_preempt: list[VictimPublic] = PydanticField(
        default_factory=list,
        description="Running jobs it would stop to start now (GPUQ_PREEMPT=priority).",
    )
