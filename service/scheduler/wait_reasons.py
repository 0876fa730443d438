"""The words a plan gives a queued job that waits (`Job.wait_reason`, shown by `gpuq
status` and `gpuq run --dry-run`): what it waits for, and what of it is free."""

from service.scheduler.gpu_choice import Asks
from service.scheduler.occupancy import Occupancy

#: a job behind the head that would push the head's start back (after `which starts first`)
DELAYS_HEAD = "this job could delay it"
#: a job behind the head that may not start before it whatever it takes: no time limit
UNBOUNDED = "a job with a time_limit_s could use idle GPUs meanwhile"


def gpus_wait_reason(occupancy: Occupancy, request: Asks) -> str:
    """`waiting for 2 GPUs whole; GPU 0 is held whole by job 9; GPU 1 has 3000 MiB free`."""
    need = "whole" if request.memory_mb is None else f"with {request.memory_mb} MiB free"
    if request.gpu_ids is not None:
        which = ", ".join(str(i) for i in request.gpu_ids)
        blocked = [
            occupancy.describe(i)
            for i in request.gpu_ids
            if not occupancy.fits(i, request.memory_mb)
        ]
        return f"waiting for GPUs {which} {need}; " + "; ".join(blocked)
    noun = "GPU" if request.gpus == 1 else "GPUs"
    state = "; ".join(occupancy.describe(i) for i in sorted(occupancy.gpus))
    return f"waiting for {request.gpus} {noun} {need}; {state}"


def sweep_full(sweep: int, running: int) -> str:
    return f"sweep {sweep} already runs {running} member(s), its max_parallel"


def over_quota(owner: str, held: int, max_gpus_running: int) -> str:
    return (
        f"over quota: {owner} already runs {held} GPU(s) and may run "
        f"{max_gpus_running} (max_gpus_running)"
    )
