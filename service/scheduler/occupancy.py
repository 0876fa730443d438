"""What the GPUs hold while a plan is made: free memory and claims per GPU."""

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuSlot:
    index: int
    memory_total_mb: int
    foreign_mb: int = 0  #: memory held by processes gpuq did not start
    #: why nothing may be placed here (draining, quarantined, drained for maintenance)
    unavailable: str | None = None
    #: unavailable only until the job that ended here has let go (free in seconds)
    draining: bool = False


@dataclass(frozen=True)
class Claim:
    job_id: int
    gpu_index: int
    memory_mb: int | None  #: None: the whole GPU
    ends_at: float | None = None  #: latest end (time limit + grace), None if unbounded


class Occupancy:
    """Free memory and claims per GPU, updated as the plan places jobs."""

    def __init__(self, gpus: Sequence[GpuSlot], claims: Sequence[Claim]) -> None:
        self.gpus = {g.index: g for g in gpus}
        self.claims_on: dict[int, list[Claim]] = {g.index: [] for g in gpus}
        for h in claims:
            self.claims_on.setdefault(h.gpu_index, []).append(h)

    def free_mb(self, index: int) -> int:
        gpu = self.gpus[index]
        if any(h.memory_mb is None for h in self.claims_on[index]):
            return 0
        declared = sum(h.memory_mb or 0 for h in self.claims_on[index])
        return max(0, gpu.memory_total_mb - gpu.foreign_mb - declared)

    def fits(self, index: int, memory_mb: int | None) -> bool:
        if index not in self.gpus or self.gpus[index].unavailable:
            return False
        if memory_mb is None:
            return not self.claims_on[index]
        return self.free_mb(index) >= memory_mb

    def take(
        self, job_id: int, indices: tuple[int, ...], memory_mb: int | None, ends_at: float | None
    ) -> None:
        for index in indices:
            self.claims_on[index].append(Claim(job_id, index, memory_mb, ends_at))

    def without(self, ended: float) -> "Occupancy":
        """This occupancy once every claim ending by `ended` is gone (inf: every claim)."""

        def stays(h: Claim) -> bool:
            return h.ends_at > ended if h.ends_at is not None else ended != math.inf

        kept = [c for claims in self.claims_on.values() for c in claims if stays(c)]
        return Occupancy(list(self.gpus.values()), kept)

    def restricted(self, allowed: Collection[int]) -> "Occupancy":
        """A view of these GPUs but `allowed` left out (a reservation's fence): what is
        taken through it is taken here too."""
        view = object.__new__(Occupancy)
        view.gpus = {i: g for i, g in self.gpus.items() if i in allowed}
        view.claims_on = self.claims_on
        return view

    def without_jobs(self, job_ids: set[int]) -> "Occupancy":
        """This occupancy once these jobs have given their GPUs back."""
        kept = [c for claims in self.claims_on.values() for c in claims if c.job_id not in job_ids]
        return Occupancy(list(self.gpus.values()), kept)

    def describe(self, index: int) -> str:
        if self.gpus[index].unavailable:
            return f"GPU {index} is {self.gpus[index].unavailable}"
        whole = [h.job_id for h in self.claims_on[index] if h.memory_mb is None]
        if whole:
            return f"GPU {index} is held whole by job {whole[0]}"
        return f"GPU {index} has {self.free_mb(index)} MiB free"
