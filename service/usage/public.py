"""The shapes of usage the API returns: `GET /v1/usage`'s report, and a job's
`efficiency`."""

from datetime import date, datetime
from typing import Any, Literal

from pydantic import BaseModel
from pydantic import Field as PydanticField

#: How a report's rows are cut: one per owner, per UTC day, or per GPU.
By = Literal["owner", "day", "gpu"]


def described(description: str) -> Any:
    """A required field of an API shape, with what it holds (every shape's fields say)."""
    return PydanticField(description=description)


class JobCounts(BaseModel):
    succeeded: int = described("Jobs that ended in the period and succeeded.")
    failed: int = described("...and failed (every retry used up, or refused before it ran).")
    cancelled: int = described("...and were cancelled, while queued or while running.")
    timed_out: int = described("...and were stopped by their time limit.")


class LostGpuHours(BaseModel):
    failures: float = described(
        "GPU-hours of failed attempts that nothing builds on: all of a job's last, failed "
        "attempt; for an attempt that failed and was retried, its work after its last epoch."
    )
    preemptions: float = described(
        "GPU-hours of preempted attempts' work after their last epoch, which the job redid."
    )


class QueueWait(BaseModel):
    attempts: int = described("Attempts that started in the period (and in this row).")
    median_s: float | None = described(
        "Their median wait, in seconds: from when the attempt could start (its submission, "
        "or its retry's time) to its launch; null: no attempt started."
    )
    p95_s: float | None = described(
        "The 95th percentile of those waits (interpolated between the nearest two, as "
        "numpy.percentile does)."
    )


class UsageRow(BaseModel):
    owner: str | None = described("The user (`by=owner`); null on other rows.")
    day: date | None = described("The UTC day (`by=day`); null on other rows.")
    gpu: int | None = described(
        "The GPU's index (`by=gpu`); null on other rows, and on a `by=gpu` row of GPU time "
        "whose GPUs are not known (Slurm's)."
    )
    gpu_hours: float = described(
        "GPUs held times hours held, inside the period: attempts that ended, and jobs still "
        "running (up to now). A job on 2 GPUs for 30 minutes is 1 GPU-hour."
    )
    share: float | None = described(
        "`gpu_hours` over what the box had in the row's time (GPUs times hours): the whole "
        "period on owner and GPU rows (rows add up to the total's), the part of that day "
        "inside the period on day rows. Two capped jobs sharing one GPU both count, so it "
        "may exceed 1. Null where gpuq knows no GPUs (Slurm)."
    )
    jobs: JobCounts = described(
        "Jobs that reached their final state in the period, by that state: on day rows by "
        "the day they ended, on GPU rows on each GPU their last attempt held."
    )
    lost_gpu_hours: LostGpuHours = described("Of `gpu_hours`, the part no result came of.")
    queue_wait: QueueWait = described("How long attempts that started in the period waited.")
    reserved_idle_gpu_hours: float = described(
        "GPU-hours booked by reservations (against whoever booked them) and left idle: "
        "nobody ran on the reserved GPUs in the window, up to its end or release. Booking "
        "has a cost."
    )


class UsageReport(BaseModel):
    since: datetime = described("The period's start (UTC), included.")
    until: datetime = described("The period's end (UTC), excluded; never later than now.")
    by: By = described("How the rows are cut: `owner`, `day` (UTC) or `gpu`.")
    gpus: int = described("GPUs gpuq knows on this box: the `share`s' denominator.")
    rows_of: str | None = described(
        "Whose work the rows count: a member who is not an admin sees only their own; null: "
        "everyone's. `total` is always the whole team's."
    )
    rows: list[UsageRow] = described(
        "Owners by GPU-hours, most first; every UTC day of the period, in order; or every "
        "GPU by index."
    )
    total: UsageRow = described("The whole team, over the whole period.")


class Efficiency(BaseModel):
    """How well a job used what it asked for, as Slurm's `seff` tells it."""

    gpu_memory_peak_mb: int | None = described(
        "The most GPU memory it was seen holding on one GPU, in MiB (NVML); null where not "
        "measured (simulated GPUs, CPU jobs)."
    )
    gpu_memory_limit_mb: int | None = described(
        "What the peak is measured against: its per-GPU cap (`memory_mb`); for whole GPUs, "
        "the GPU's memory where known; else null."
    )
    gpu_memory_used_pct: float | None = described("The peak as a percentage of that limit.")
    suggested_memory_mb: int | None = described(
        "The per-GPU cap to ask for next time: the peak plus 20 %, rounded up (to 256 MiB "
        "up to 2 GiB, 512 MiB up to 8 GiB, whole GiB above); null unless the peak was under "
        "half the limit, or went over the cap."
    )
    gpu_util_avg_pct: float | None = described(
        "Its GPUs' average utilisation while it ran, in percent (NVML); null where unknown."
    )
    wall_s: float | None = described(
        "How long its latest attempt ran: from its launch to its end, or to now while it runs."
    )
    time_limit_s: float | None = described("Its spec's `time_limit_s`; null: none.")
    time_used_pct: float | None = described("`wall_s` as a percentage of the time limit.")
    cores_used: float | None = described(
        "Cores' worth of CPU time its last attempt used (its cgroup's CPU time over `wall_s`), "
        "against its `cpus`; null until an attempt has ended, or where jobs are not fenced."
    )
    text: str = described(
        "All of it in one line, as `gpuq show` prints it, e.g. `used 2.1 of 8 GiB requested: "
        "ask for 3 GiB; GPU utilisation 43 %; ran 12 min of its 1 h limit`."
    )
