"""The words a plan gives a job it places (`Placement.why`, kept as `Job.placement` and
shown by `gpuq show` and `gpuq run --dry-run`): what each of its GPUs held, and why a
shared job went beside others while a GPU sat idle."""

from collections.abc import Sequence

from service.scheduler.gpu_choice import Asks, Policy
from service.scheduler.occupancy import Occupancy


def placed_because(
    occupancy: Occupancy,
    request: Asks,
    chosen: tuple[int, ...],
    policy: Policy,
    held_for: Sequence[int],
) -> str:
    """`GPU 1: idle`; `GPU 0: beside job 7, to keep GPU 1 whole for job 12`, as
    `occupancy` is before the job takes `chosen`; `held_for`: the jobs `balanced` keeps
    idle GPUs whole for (the head last)."""
    claims = occupancy.claims_on
    said = "; ".join(f"GPU {i}: {_what_held(occupancy, request, i)}" for i in chosen)
    if request.memory_mb is None or request.gpu_ids is not None:
        return said
    if not any(claims[i] for i in chosen):
        return said
    idle = [
        i
        for i in sorted(occupancy.gpus)
        if i not in chosen and not claims[i] and occupancy.fits(i, request.memory_mb)
    ]
    if not idle:
        return f"{said}; no GPU it fits is idle"
    if policy == "pack":
        return f"{said}; packed (GPUQ_PLACEMENT=pack) to keep {_gpus(idle)} whole"
    if held_for:
        return f"{said}; packed to keep {_gpus(idle)} whole for {_jobs(held_for)}"
    return said


def _what_held(occupancy: Occupancy, request: Asks, index: int) -> str:
    if request.gpu_ids is not None:
        return "asked for"
    if request.memory_mb is None:
        return "whole"
    beside = [c.job_id for c in occupancy.claims_on[index]]
    return f"beside {_jobs(beside)}" if beside else "idle"


def _gpus(indices: Sequence[int]) -> str:
    return ("GPU " if len(indices) == 1 else "GPUs ") + ", ".join(map(str, indices))


def _jobs(ids: Sequence[int]) -> str:
    return ("job " if len(ids) == 1 else "jobs ") + ", ".join(map(str, ids))
