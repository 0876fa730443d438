"""`/v1/gpus`: the inventory with allocations and foreign processes; releasing held GPUs."""

from typing import Annotated

from fastapi import APIRouter, Path

from service.api.deps import AdminDep, CallerDep, ServiceDep
from service.api.errors import documented
from service.public import GpuNodePublic, GpuPublic

router = APIRouter(
    prefix="/v1/gpus", tags=["gpus"], responses=documented(400, 401, 403, 404, 409, 413, 503)
)

GpuIndex = Annotated[int, Path(ge=0, le=1023, description="The GPU's NVML index.")]


@router.get("")
def list_gpus(service: ServiceDep, caller: CallerDep) -> list[GpuPublic] | list[GpuNodePublic]:
    """Every GPU: memory total/used/free, which jobs hold it, and processes gpuq did not
    start. Under `GPUQ_EXECUTOR=slurm`: the partition's GPU nodes (node, GPUs, allocated,
    state), from `sinfo`."""
    return service.gpus.describe()


@router.post("/{index}/release")
def release_gpu(index: GpuIndex, service: ServiceDep, admin: AdminDep) -> GpuPublic:
    """Puts a draining or quarantined GPU back into use. Admins; 409 if it is not held."""
    return service.gpus.release(index, admin)
