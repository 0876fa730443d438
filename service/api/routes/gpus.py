"""`/v1/gpus`: the inventory with allocations and foreign processes."""

from fastapi import APIRouter

from service.api.deps import ServiceDep
from service.models import GpuPublic

router = APIRouter(prefix="/v1/gpus", tags=["gpus"])


@router.get("")
def list_gpus(service: ServiceDep) -> list[GpuPublic]:
    """Every GPU: memory total/used/free, which jobs hold it, and processes gpuq did not start."""
    return service.board.describe(service.scheduler.job_groups())
