"""What gpuq's processes hold open, and the one call each route makes: `Service` is the
domain's front door, split by feature (`jobs`, `sweeps`, `gpus`), opened by one factory
per kind of process (`roles`)."""

from service.runtime.roles import (
    Scheduling,
    open_api,
    open_scheduler,
    open_with_scheduler,
    open_with_scheduler_process,
)
from service.runtime.service import SchedulerHandle, Service

__all__ = [
    "SchedulerHandle",
    "Scheduling",
    "Service",
    "open_api",
    "open_scheduler",
    "open_with_scheduler",
    "open_with_scheduler_process",
]
