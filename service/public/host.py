"""`GET /v1/host`: the box's cores and host memory, what gpuq keeps for itself, and what
each running job holds."""

from pydantic import BaseModel

from service.usage.public import described


class HostJobPublic(BaseModel):
    id: int = described("The running job.")
    owner: str = described("Its owner.")
    cpus: float | None = described("The cores it holds; null: none asked, no default.")
    host_memory_mb: int | None = described("The host memory it holds, in MiB; null: none.")


class HostPublic(BaseModel):
    cpus_total: float = described("The box's cores (GPUQ_HOST_CPUS, else detected).")
    cpus_reserved: float = described("Kept for the OS and gpuq (GPUQ_RESERVED_CPUS).")
    cpus_held: float = described("Held by running jobs.")
    cpus_free: float = described("Left for more jobs: total less reserved less held.")
    memory_total_mb: int = described("The box's host memory in MiB (MemTotal).")
    memory_reserved_mb: int = described("Kept for the OS and gpuq (GPUQ_RESERVED_HOST_MEMORY_MB).")
    memory_held_mb: int = described("Held by running jobs.")
    memory_free_mb: int = described("Left for more jobs.")
    jobs: list[HostJobPublic] = described("The running jobs that hold cores or host memory.")
