"""GPUs and Slurm nodes as the API shows them, with allocations and an admin's drains."""

from datetime import datetime

from pydantic import BaseModel
from pydantic import Field as PydanticField

from gpuq.contract.states import GpuState
from service.usage.public import described


class AllocationPublic(BaseModel):
    job_id: int = described("The job holding part or all of this GPU.")
    memory_mb: int | None = described("Declared cap in MiB; null for a whole GPU.")


class ForeignProcess(BaseModel):
    pid: int = described("Process id on the host.")
    memory_mb: int = described("GPU memory it holds, in MiB.")


class GpuNodePublic(BaseModel):
    """A GPU node of the Slurm partition (`GPUQ_EXECUTOR=slurm`), from `sinfo`."""

    node: str = described("Slurm's node name.")
    gpus: int = described("GPUs the node has (its `gpu` GRES).")
    gpus_allocated: int = described("GPUs Slurm has given to jobs.")
    gpus_free: int = described("GPUs neither allocated nor on a node that is down or drained.")
    state: str = described("Slurm's node state: idle, mixed, allocated, down, drained...")


class MaintenancePublic(BaseModel):
    reason: str | None = described("Why, in the admin's words.")
    by: str = described("The admin who drained it.")
    since: datetime = described("Drained since (UTC).")


class DrainPublic(BaseModel):
    """An admin's maintenance drain: nothing new starts there until it is resumed."""

    gpu: int | None = described("The GPU drained; null: the whole box.")
    reason: str | None = described("Why, in the admin's words.")
    by: str = described("The admin who drained it.")
    since: datetime = described("Drained since (UTC).")


class GpuPublic(BaseModel):
    index: int = described("NVML index, as used in CUDA_VISIBLE_DEVICES (PCI bus order).")
    uuid: str = described("NVML UUID.")
    name: str = described("Model name.")
    memory_total_mb: int = described("Total memory in MiB.")
    memory_used_mb: int = described("Used memory in MiB (NVML; declared caps on simulated GPUs).")
    memory_free_mb: int = described("Free memory in MiB.")
    state: GpuState = described("`free`, `in_use`, `draining` or `quarantined`.")
    state_reason: str | None = described("Why a GPU is draining or quarantined.")
    utilization_pct: int | None = described("GPU utilisation in percent (NVML; null when unknown).")
    simulated: bool = described("True for GPUs simulated with CPU devices (`GPUQ_GPUS=sim:...`).")
    allocations: list[AllocationPublic] = described("Jobs placed on this GPU.")
    foreign_processes: list[ForeignProcess] = described(
        "Processes gpuq did not start, with memory."
    )
    maintenance: MaintenancePublic | None = PydanticField(
        None,
        description="The admin's drain of this GPU (or of the whole box): no new job starts "
        "on it until resumed; null: not drained.",
    )
