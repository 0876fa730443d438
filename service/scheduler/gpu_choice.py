"""Which GPUs a job gets, as the GPUs are now: a pure function of what it asks and what
the GPUs hold (`placement.plan` calls it for each job that may start).

Shared jobs go best fit (the fullest GPUs that still fit). A multi-GPU job gets the set of
GPUs whose farthest pair is closest in the NVML topology (NVLink, then the same PCIe
switch, ...), since MirroredStrategy all-reduces between every pair each step.
"""

import itertools
from collections.abc import Mapping, Sequence
from typing import Protocol

from service.scheduler.occupancy import Occupancy

#: How many GPU sets a multi-GPU job may weigh; past this, the best-fit set is taken.
MAX_SETS = 5000
#: Topology level assumed for a pair NVML did not describe.
FAR = 1000

Topology = Mapping[tuple[int, int], int]


class Asks(Protocol):
    """What a job asks of the GPUs (a `placement.Request`)."""

    @property
    def gpus(self) -> int: ...
    @property
    def gpu_ids(self) -> tuple[int, ...] | None: ...
    @property
    def memory_mb(self) -> int | None: ...  # None: whole GPUs


def spread(gpus: Sequence[int], topology: Topology) -> int:
    """The topology level of the farthest pair in `gpus` (0 for a single GPU)."""
    return max(
        (topology.get((min(a, b), max(a, b)), FAR) for a, b in itertools.combinations(gpus, 2)),
        default=0,
    )


def choose(occupancy: Occupancy, request: Asks, topology: Topology) -> tuple[int, ...] | None:
    """The GPUs `request` gets as `occupancy` is now; None if it fits on none."""
    if request.gpu_ids is not None:
        ok = all(occupancy.fits(i, request.memory_mb) for i in request.gpu_ids)
        return tuple(request.gpu_ids) if ok else None
    candidates = [i for i in sorted(occupancy.gpus) if occupancy.fits(i, request.memory_mb)]
    if len(candidates) < request.gpus:
        return None
    if request.memory_mb is not None:
        # Best fit: the fullest GPUs that still fit, keeping emptier ones whole for big jobs.
        candidates.sort(key=lambda i: (occupancy.free_mb(i), i))
    chosen = tuple(candidates[: request.gpus])
    if request.gpus > 1 and topology and len(candidates) > request.gpus:
        # Sets come in best-fit order, so the first of the closest sets is also the best fit.
        sets = itertools.islice(itertools.combinations(candidates, request.gpus), MAX_SETS)
        chosen = min(sets, key=lambda s: spread(s, topology))
    return tuple(sorted(chosen))
