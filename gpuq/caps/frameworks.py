"""A job's GPU memory cap in the terms of PyTorch and JAX, which `command` jobs may use
instead of TensorFlow.

TensorFlow takes the cap as a device limit (`devices.configure`); PyTorch takes it as a
fraction of each GPU's memory for its caching allocator, and JAX as a fraction in its
environment, read when its backend starts. The start-up hook applies them inside the
user's program, so this module imports nothing but the standard library at module level.
"""

import math
import sys
from collections.abc import Mapping
from typing import Any

from gpuq.contract.device_plan import DevicePlan

MIB = 1024 * 1024

#: PyTorch's allocator settings, under their CUDA-only name and the newer general one.
TORCH_ALLOC_CONFS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def job_cap_mb(plan: DevicePlan) -> int | None:
    """The job's share of each of its GPUs (every logical replica on it, headroom taken
    off), or None when nothing caps it: memory growth, whole GPUs, no real GPU."""
    if plan.mode != "gpu" or plan.memory_growth or plan.memory_limit_mb is None:
        return None
    return plan.memory_limit_mb * plan.replicas_per_gpu


def torch_fraction(plan: DevicePlan, total_bytes: int) -> float | None:
    """The fraction for `torch.cuda.set_per_process_memory_fraction` on a GPU of
    `total_bytes`, or None without a cap."""
    cap = job_cap_mb(plan)
    if cap is None or total_bytes <= 0:
        return None
    return min(1.0, cap * MIB / total_bytes)


def jax_fraction(plan: DevicePlan) -> str | None:
    """`XLA_PYTHON_CLIENT_MEM_FRACTION` for the cap, rounded down so that it never allows
    more than the cap; None without a cap or without the GPU's total memory."""
    cap = job_cap_mb(plan)
    if cap is None or not plan.memory_total_mb:
        return None
    return f"{math.floor(min(1.0, cap / plan.memory_total_mb) * 10_000) / 10_000:.4f}"


def startup_environment(plan: DevicePlan, env: Mapping[str, str]) -> dict[str, str | None]:
    """The variables to set (a value) or remove (None) in `env` before the program imports
    a framework. Applying them twice changes nothing: child interpreters inherit them and
    run the hook again."""
    changes: dict[str, str | None] = {}
    if plan.mode != "gpu":
        # Simulated and CPU jobs train on the CPU, even on a host that has real GPUs.
        changes.update(CUDA_VISIBLE_DEVICES="", JAX_PLATFORMS="cpu")
        return changes
    if plan.memory_growth or job_cap_mb(plan) is not None:
        # JAX would otherwise take 75 % of each GPU at once, whatever the job needs, and
        # NVML's peaks would say nothing. A user's own choice stays: it cannot lift a cap.
        changes["XLA_PYTHON_CLIENT_PREALLOCATE"] = env.get("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    fraction = jax_fraction(plan)
    if fraction is not None:
        theirs = _as_float(env.get("XLA_PYTHON_CLIENT_MEM_FRACTION"))
        if theirs is None or theirs > float(fraction):
            changes["XLA_PYTHON_CLIENT_MEM_FRACTION"] = fraction
        if env.get("XLA_PYTHON_CLIENT_ALLOCATOR") == "platform":
            # The platform allocator has no limit: it would lift the fraction.
            changes["XLA_PYTHON_CLIENT_ALLOCATOR"] = None
    if job_cap_mb(plan) is not None:
        for name in TORCH_ALLOC_CONFS:
            if name in env:
                kept = _without_async_backend(env[name])
                if kept != env[name]:
                    changes[name] = kept or None
    return changes


def cap_torch(torch: Any, plan: DevicePlan) -> None:
    """Queues the cap on every visible GPU for when PyTorch initialises CUDA.

    `torch.cuda._lazy_call` runs it then, as `torch.cuda.manual_seed` does its seeds: so
    importing torch (in every DataLoader worker too) creates no CUDA context, and the cap
    is in place before the first allocation."""
    if job_cap_mb(plan) is None:
        return
    lazy_call = getattr(torch.cuda, "_lazy_call", None)
    if lazy_call is None:
        _warn("this PyTorch has no torch.cuda._lazy_call, so PyTorch was not told the cap")
        return

    def set_fractions() -> None:
        try:
            for device in range(torch.cuda.device_count()):
                total = torch.cuda.get_device_properties(device).total_memory
                fraction = torch_fraction(plan, total)
                if fraction is not None:
                    torch.cuda.set_per_process_memory_fraction(fraction, device)
        except Exception as exc:  # the cap is gpuq's business: never the program's crash
            _warn(f"PyTorch refused the cap ({exc!r})")

    lazy_call(set_fractions)


def _without_async_backend(conf: str) -> str:
    # The options are `key:value` pairs joined by commas. `cudaMallocAsync` hands memory to
    # CUDA's own pool, not to the caching allocator whose fraction holds the cap.
    options = conf.split(",")
    return ",".join(o for o in options if o.replace(" ", "") != "backend:cudaMallocAsync")


def _as_float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _warn(what: str) -> None:
    print(
        f"gpuq: {what}; the job's GPU memory cap rests on gpuq's NVML watchdog alone",
        file=sys.stderr,
    )
