"""The idle GPUs `balanced` placement keeps whole (`GPUQ_PLACEMENT`): a shared job takes
an idle GPU only while one is spare, and an idle GPU is not spare while a queued job that
needs whole GPUs could start on it now, or soon."""

from collections.abc import Sequence
from typing import Protocol

from service.scheduler.gpu_choice import Asks
from service.scheduler.occupancy import Occupancy


class Queued(Asks, Protocol):
    """A queued job, as the plan sees it (a `placement.Request`)."""

    @property
    def job_id(self) -> int: ...


#: How soon GPUs must be free for the first exclusive job that cannot start now for
#: `balanced` to keep the idle ones whole for it (an hour: a shared job placed beside
#: others instead runs slower meanwhile, one placed on an idle GPU may hold it for hours).
KEEP_HORIZON_S = 3600.0


def kept_whole(ordered: Sequence[Queued], occupancy: Occupancy, now: float) -> dict[int, int]:
    """The queued exclusive jobs `balanced` keeps idle GPUs whole for (job id → how many),
    in queue order: each that could start on the idle GPUs left, then the first that could
    not, if the GPUs it lacks would be free within `KEEP_HORIZON_S` by the running jobs'
    time limits."""
    idle = sum(1 for i in occupancy.gpus if occupancy.fits(i, None))
    kept: dict[int, int] = {}
    for request in ordered:
        if idle == 0:
            break
        if request.gpus == 0 or request.memory_mb is not None or request.gpu_ids is not None:
            continue
        if request.gpus <= idle:
            kept[request.job_id] = request.gpus
            idle -= request.gpus
            continue
        soon = occupancy.without(now + KEEP_HORIZON_S)
        if sum(1 for i in soon.gpus if soon.fits(i, None)) >= request.gpus:
            kept[request.job_id] = idle
        break
    return kept
