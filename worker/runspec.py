"""What the scheduler hands a worker in `spec.json`: the job spec plus its placement."""

from typing import Literal

from pydantic import BaseModel

from service.spec import JobSpec


class Devices(BaseModel):
    mode: Literal["gpu", "sim", "cpu"]
    count: int
    indices: list[int]
    memory_limit_mb: int | None = None
    memory_growth: bool = False
    replicas_per_gpu: int = 1


class RunSpec(BaseModel):
    job_id: int
    attempt: int
    spec: JobSpec
    devices: Devices
