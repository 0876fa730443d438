"""A job's efficiency, as Slurm's `seff` tells it: its GPU memory peak against what it asked
for (and the cap to ask for next time), its GPUs' utilisation, its time against its limit.
Pure: a job's fields in, an `Efficiency` out."""

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gpuq.contract.states import ACTIVE, TERMINAL
from service.usage.public import Efficiency

#: Room a suggested cap leaves over the peak: TensorFlow's allocator grows in steps.
HEADROOM = 1.2
#: A job that used under this share of what it held is told what to ask for instead.
UNDER_USED = 0.5
#: The job's fields that `efficiency` reads.
EFFICIENCY_FIELDS = (
    "status",
    "started_at",
    "finished_at",
    "gpu_count",
    "memory_mb",
    "gpu_memory_peak_mb",
    "gpu_memory_total_mb",
    "gpu_util_avg_pct",
    "spec",
    "cpus",
    "host_memory_mb",
    "host_memory_peak_mb",
    "cpu_time_s",
)


def efficiency(job: Mapping[str, Any], now: datetime) -> Efficiency | None:
    """How the job used what it asked for, from its `EFFICIENCY_FIELDS`; None if it never
    started. A whole-GPU job is measured against its GPUs' memory (`gpu_memory_total_mb`,
    kept as it started)."""
    started = job.get("started_at")
    status = job.get("status")
    if started is None or status not in ACTIVE | TERMINAL:
        return None  # never launched, or queued again: no attempt running or ended
    on_gpus = bool(job.get("gpu_count"))
    cap = job.get("memory_mb") if on_gpus else None
    peak = job.get("gpu_memory_peak_mb") if on_gpus else None
    limit = cap if cap is not None else job.get("gpu_memory_total_mb") if on_gpus else None
    used_pct = 100 * peak / limit if peak is not None and limit else None
    suggestion = _suggestion(peak, limit, capped=cap is not None)
    util = job.get("gpu_util_avg_pct") if on_gpus else None
    end = job.get("finished_at") if status in TERMINAL else now
    wall = max(0.0, ((end or now) - started).total_seconds())
    limit_s = (job.get("spec") or {}).get("time_limit_s")
    parts = [
        _memory_text(peak, limit, suggestion, capped=cap is not None) if on_gpus else "",
        f"GPU utilisation {util:.0f} %" if util is not None else "",
        _time_text(wall, limit_s, running=status in ACTIVE),
        host_text(job, wall),
    ]
    return Efficiency(
        gpu_memory_peak_mb=peak,
        gpu_memory_limit_mb=limit,
        gpu_memory_used_pct=None if used_pct is None else round(used_pct, 1),
        suggested_memory_mb=suggestion,
        gpu_util_avg_pct=util,
        wall_s=round(wall, 1),
        time_limit_s=limit_s,
        time_used_pct=round(100 * wall / limit_s, 1) if limit_s else None,
        cores_used=_cores_used(job.get("cpu_time_s"), wall),
        text="; ".join(p for p in parts if p),
    )


def suggested_cap_mb(peak_mb: int) -> int:
    """The peak plus 20 %, rounded up to 256 MiB up to 2 GiB, 512 MiB up to 8 GiB, then
    whole GiB: `2150` (2.1 GiB) -> 3072."""
    want = peak_mb * HEADROOM
    step = 256 if want <= 2048 else 512 if want <= 8192 else 1024
    return max(step, math.ceil(want / step) * step)


def _suggestion(peak: int | None, limit: int | None, *, capped: bool) -> int | None:
    """A cap to ask for, where the job used under half its limit, or went over its cap."""
    if peak is None or limit is None:
        return None
    if peak < UNDER_USED * limit or (capped and peak > limit):
        return suggested_cap_mb(peak)
    return None


def _memory_text(
    peak: int | None, limit: int | None, suggestion: int | None, *, capped: bool
) -> str:
    if peak is None:  # simulated GPUs, or no reading yet
        if capped:
            return f"GPU memory not measured ({memory_amount(limit)} per GPU requested)"
        if limit is None:
            return "GPU memory not measured"
        return f"GPU memory not measured (whole {memory_amount(limit)} GPUs)"
    if limit is None:
        return f"GPU memory peak {memory_amount(peak)}"
    if capped:
        text = f"used {_of(peak, limit)} requested"
        return text + (f": next time --mem {mem_option(suggestion)}" if suggestion else "")
    text = f"used {memory_amount(peak)} of a whole {memory_amount(limit)} GPU"
    return text + (
        f": --mem {mem_option(suggestion)} would let others share it" if suggestion else ""
    )


def mem_option(mb: int) -> str:
    """A cap as `--mem` takes it: `3G`, `768M`."""
    return f"{mb // 1024}G" if mb % 1024 == 0 else f"{mb}M"


def _cores_used(cpu_time_s: float | None, wall_s: float) -> float | None:
    """Cores' worth of CPU time over its run: its CPU time over its wall time."""
    if cpu_time_s is None or wall_s <= 0:
        return None
    return round(cpu_time_s / wall_s, 1)


def host_text(job: Mapping[str, Any], wall_s: float) -> str:
    """`used 3.1 of 8 cores, 22 of 32 GiB host memory`: what its fence measured of the box
    against what it got, once an attempt has ended ("" before)."""
    cores = _cores_used(job.get("cpu_time_s"), wall_s)
    peak, got = job.get("host_memory_peak_mb"), job.get("host_memory_mb")
    parts = []
    if cores is not None:
        asked = job.get("cpus")
        parts.append(f"{cores:g} of {asked:g} cores" if asked else f"{cores:g} cores")
    if peak is not None:
        held = _of(peak, got) if got else memory_amount(peak)
        parts.append(f"{held} host memory")
    return "used " + ", ".join(parts) if parts else ""


def _time_text(wall_s: float, limit_s: float | None, *, running: bool) -> str:
    verb = "running for" if running else "ran"
    return f"{verb} {duration(wall_s)}" + (f" of its {duration(limit_s)} limit" if limit_s else "")


def memory_amount(mb: int | None) -> str:
    """`768 MiB`, `3 GiB`, `2.1 GiB`."""
    if mb is None:
        return "?"
    return f"{mb} MiB" if mb < 1024 else f"{_gib(mb)} GiB"


def _of(peak: int, limit: int) -> str:
    """`2.1 of 8 GiB`, or `700 MiB of 8 GiB` where the units differ."""
    if peak >= 1024 and limit >= 1024:
        return f"{_gib(peak)} of {_gib(limit)} GiB"
    return f"{memory_amount(peak)} of {memory_amount(limit)}"


def _gib(mb: int) -> str:
    return f"{mb / 1024:.1f}".removesuffix(".0")


def duration(seconds: float) -> str:
    """`45 s`, `1 min 30 s`, `12 min`, `1 h`, `1 h 30 min`, `2 d 3 h`."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 600:  # seconds still matter here
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h" + (f" {minutes} min" if minutes else "")
    days, hours = divmod(hours, 24)
    return f"{days} d" + (f" {hours} h" if hours else "")
