"""The CPU cores and host memory a job gets, fixed at submit: its spec's, else the site's
defaults (`GPUQ_DEFAULT_*`) for what it holds of the box's GPUs.

A job on whole GPUs gets the per-GPU default for each; a job sharing GPUs (`memory_mb`)
the part of it that its cap is of the box's largest GPU, so four jobs packed on one GPU
hold what one whole-GPU job would; a job with no GPU gets the CPU-only defaults. A
default never makes a job larger than the box can give (it is cut to the box's size); a
spec's own figure is kept as asked, and admission refuses one larger than the box.
"""

import math
from dataclasses import dataclass

from gpuq.contract.spec import Resources
from service.host import HostSize
from service.settings import Settings

#: a default's cores are never fewer: a sliver of a core makes a job crawl
MIN_DEFAULT_CPUS = 0.1
#: nor its host memory under the spec's own floor
MIN_DEFAULT_HOST_MEMORY_MB = 16


@dataclass(frozen=True)
class HostShare:
    """What a job got of the box (per node): None where it asked for nothing and no
    default applies."""

    cpus: float | None = None
    host_memory_mb: int | None = None


@dataclass(frozen=True)
class ShareDefaults:
    """The site's defaults for a job that names no cores or host memory, and what bounds
    them."""

    cpus_per_gpu: float | None = None
    host_memory_per_gpu_mb: int | None = None
    cpus: float | None = None  #: for a job with no GPU
    host_memory_mb: int | None = None  #: for a job with no GPU
    largest_gpu_mb: int = 0  #: the box's largest GPU (0: unknown; a shared GPU counts whole)
    box: HostSize | None = None  #: a default is cut to what it gives; None: no bound (Slurm)

    @classmethod
    def of(
        cls, settings: Settings, *, largest_gpu_mb: int, box: HostSize | None
    ) -> "ShareDefaults":
        return cls(
            cpus_per_gpu=settings.default_cpus_per_gpu,
            host_memory_per_gpu_mb=settings.default_host_memory_per_gpu_mb,
            cpus=settings.default_cpus,
            host_memory_mb=settings.default_host_memory_mb,
            largest_gpu_mb=largest_gpu_mb,
            box=box,
        )


def resolve_share(resources: Resources, defaults: ShareDefaults) -> HostShare:
    """The cores and host memory a job with `resources` gets: the spec's where it names
    them, else what `defaults` give it."""
    given = default_share(resources, defaults)
    return HostShare(
        resources.cpus if resources.cpus is not None else given.cpus,
        resources.host_memory_mb if resources.host_memory_mb is not None else given.host_memory_mb,
    )


def default_share(resources: Resources, defaults: ShareDefaults) -> HostShare:
    """What the site's defaults give a job with `resources`, rounded up (cores to 0.01,
    memory to the MiB) and cut to the box."""
    gpus = resources.gpu_count
    cpus: float | None
    memory_mb: int | None
    if gpus == 0:
        cpus, memory_mb = defaults.cpus, defaults.host_memory_mb
    else:
        # A shared GPU's part: its cap over the largest GPU (whole where that is unknown).
        part, whole = resources.memory_mb or 0, defaults.largest_gpu_mb
        if not part or not whole or part >= whole:
            part = whole = 1
        cpus = memory_mb = None
        if defaults.cpus_per_gpu is not None:
            hundredths = math.ceil(defaults.cpus_per_gpu * gpus * part / whole * 100 - 1e-6)
            cpus = max(MIN_DEFAULT_CPUS, hundredths / 100)
        if defaults.host_memory_per_gpu_mb is not None:
            rounded_up = -(-defaults.host_memory_per_gpu_mb * gpus * part // whole)
            memory_mb = max(MIN_DEFAULT_HOST_MEMORY_MB, rounded_up)
    box = defaults.box
    if box is not None:
        if cpus is not None and box.cpus > 0:
            cpus = min(cpus, box.cpus)
        if memory_mb is not None and box.memory_mb > 0:
            memory_mb = min(memory_mb, box.memory_mb)
    return HostShare(cpus, memory_mb)
