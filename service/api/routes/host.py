"""`/v1/host`: the box's cores and host memory, and what running jobs hold of them."""

from fastapi import APIRouter

from service.api.deps import CallerDep, ServiceDep
from service.api.errors import documented
from service.public import HostPublic

router = APIRouter(prefix="/v1/host", tags=["gpus"], responses=documented(401, 403, 409))


@router.get("")
def describe_host(service: ServiceDep, caller: CallerDep) -> HostPublic:
    """The box's cores and host memory: all of them, what gpuq keeps for the OS and itself
    (`GPUQ_RESERVED_*`), what running jobs hold (each job's `cpus` and `host_memory_mb`),
    and what is free. 409 under `GPUQ_EXECUTOR=slurm`, whose nodes Slurm counts."""
    return service.gpus.host()
