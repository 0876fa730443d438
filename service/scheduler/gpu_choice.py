"""Which GPUs a job gets, as the GPUs are now: a pure function of what it asks, what the
GPUs hold and the box's placement policy (`placement.plan` calls it for each job that may
start).

A shared job (one with a memory cap) goes, by `GPUQ_PLACEMENT`:

- `balanced` (the default): as `spread`, but idle GPUs that queued whole-GPU jobs need are
  kept whole for them (`keep`), and behind the head the GPUs it was promised are taken
  last (`avoid`): beside other jobs only when every GPU is busy or the idle ones are kept;
- `pack`: best fit, the fullest GPU that still fits, keeping emptier ones whole;
- `spread`: the emptiest GPU, the one the fewest jobs share.

An exclusive job takes idle GPUs whatever the policy. A multi-GPU job gets, among the sets
in that order of preference, the set whose farthest pair is closest in the NVML topology
(NVLink, then the same PCIe switch, ...), since MirroredStrategy all-reduces between every
pair each step.
"""

import itertools
from collections.abc import Collection, Mapping, Sequence
from typing import Literal, Protocol

from service.scheduler.occupancy import Occupancy

#: How many GPU sets a multi-GPU job may weigh; past this, the first set in order is taken.
MAX_SETS = 5000
#: Topology level assumed for a pair NVML did not describe.
FAR = 1000

Topology = Mapping[tuple[int, int], int]
Policy = Literal["balanced", "pack", "spread"]


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


def choose(
    occupancy: Occupancy,
    request: Asks,
    topology: Topology,
    policy: Policy = "pack",
    *,
    keep: int = 0,
    avoid: Collection[int] = (),
) -> tuple[int, ...] | None:
    """The GPUs `request` gets as `occupancy` is now; None if it fits on none. Under
    `balanced`, `keep` idle GPUs are kept whole for queued jobs that need them and the
    GPUs in `avoid` (the head's) are taken last."""
    if request.gpu_ids is not None:
        ok = all(occupancy.fits(i, request.memory_mb) for i in request.gpu_ids)
        return tuple(request.gpu_ids) if ok else None
    candidates = [i for i in sorted(occupancy.gpus) if occupancy.fits(i, request.memory_mb)]
    if len(candidates) < request.gpus:
        return None
    if request.memory_mb is not None:
        candidates = preferred(occupancy, candidates, policy, keep, avoid)
    chosen = tuple(candidates[: request.gpus])
    if request.gpus > 1 and topology and len(candidates) > request.gpus:
        # Sets come in order of preference, so the first of the closest sets is preferred.
        sets = itertools.islice(itertools.combinations(candidates, request.gpus), MAX_SETS)
        chosen = min(sets, key=lambda s: spread(s, topology))
    return tuple(sorted(chosen))


def preferred(
    occupancy: Occupancy, fitting: list[int], policy: Policy, keep: int, avoid: Collection[int]
) -> list[int]:
    """The GPUs a shared job fits on, most preferred first."""
    claims, free = occupancy.claims_on, occupancy.free_mb
    if policy == "pack":
        return sorted(fitting, key=lambda i: (free(i), i))
    emptiest = sorted(fitting, key=lambda i: (len(claims[i]), -free(i), i))
    if policy == "spread":
        return emptiest
    idle = [i for i in fitting if not claims[i] and i not in avoid]
    spare = idle[: max(0, len(idle) - keep)]
    busy = [i for i in emptiest if claims[i]]
    return [*spare, *busy, *(i for i in fitting if not claims[i] and i not in spare)]
