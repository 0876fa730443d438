"""Where queued jobs go: a pure function of the queue, the GPUs and who holds what.

Jobs are considered in priority order, then submission order. A GPU job that cannot start
now blocks the GPU jobs behind it, so a large job is never starved by a stream of small
ones. CPU-only jobs (`gpus: 0`) need no GPU and only wait for a CPU slot.

Shared jobs go best fit (the fullest GPUs that still fit). A multi-GPU job gets the set of
GPUs whose farthest pair is closest in the NVML topology (NVLink, then the same PCIe
switch, ...), since MirroredStrategy all-reduces between every pair each step.
"""

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuSlot:
    index: int
    memory_total_mb: int
    foreign_mb: int = 0  #: memory held by processes gpuq did not start
    unavailable: str | None = None  #: why nothing may be placed here (draining, quarantined)


@dataclass(frozen=True)
class Held:
    job_id: int
    gpu_index: int
    memory_mb: int | None  #: None: the whole GPU


@dataclass(frozen=True)
class Request:
    job_id: int
    priority: int
    gpus: int
    gpu_ids: tuple[int, ...] | None = None
    memory_mb: int | None = None  #: None: whole GPUs


@dataclass(frozen=True)
class Placement:
    job_id: int
    gpu_indices: tuple[int, ...]
    memory_mb: int | None


#: How many GPU sets a multi-GPU job may weigh; past this, the best-fit set is taken.
MAX_SETS = 5000
#: Topology level assumed for a pair NVML did not describe.
FAR = 1000

Topology = Mapping[tuple[int, int], int]


@dataclass
class Plan:
    placements: list[Placement] = field(default_factory=list)
    waiting: dict[int, str] = field(default_factory=dict)  #: job id → human reason


def order(queue: Sequence[Request]) -> list[Request]:
    """Priority first (higher earlier), then submission order."""
    return sorted(queue, key=lambda r: (-r.priority, r.job_id))


class _Board:
    """Free memory and holders per GPU, updated as the plan places jobs."""

    def __init__(self, gpus: Sequence[GpuSlot], held: Sequence[Held]) -> None:
        self.gpus = {g.index: g for g in gpus}
        self.holders: dict[int, list[Held]] = {g.index: [] for g in gpus}
        for h in held:
            self.holders.setdefault(h.gpu_index, []).append(h)

    def free_mb(self, index: int) -> int:
        gpu = self.gpus[index]
        if any(h.memory_mb is None for h in self.holders[index]):
            return 0
        declared = sum(h.memory_mb or 0 for h in self.holders[index])
        return max(0, gpu.memory_total_mb - gpu.foreign_mb - declared)

    def fits(self, index: int, memory_mb: int | None) -> bool:
        if index not in self.gpus or self.gpus[index].unavailable:
            return False
        if memory_mb is None:
            return not self.holders[index]
        return self.free_mb(index) >= memory_mb

    def take(self, job_id: int, indices: tuple[int, ...], memory_mb: int | None) -> None:
        for index in indices:
            self.holders[index].append(Held(job_id, index, memory_mb))

    def describe(self, index: int) -> str:
        if self.gpus[index].unavailable:
            return f"GPU {index} is {self.gpus[index].unavailable}"
        whole = [h.job_id for h in self.holders[index] if h.memory_mb is None]
        if whole:
            return f"GPU {index} is held whole by job {whole[0]}"
        return f"GPU {index} has {self.free_mb(index)} MiB free"


def spread(gpus: Sequence[int], topology: Topology) -> int:
    """The topology level of the farthest pair in `gpus` (0 for a single GPU)."""
    return max(
        (topology.get((min(a, b), max(a, b)), FAR) for a, b in itertools.combinations(gpus, 2)),
        default=0,
    )


def _choose(board: _Board, request: Request, topology: Topology) -> tuple[int, ...] | None:
    if request.gpu_ids is not None:
        ok = all(board.fits(i, request.memory_mb) for i in request.gpu_ids)
        return tuple(request.gpu_ids) if ok else None
    candidates = [i for i in sorted(board.gpus) if board.fits(i, request.memory_mb)]
    if len(candidates) < request.gpus:
        return None
    if request.memory_mb is not None:
        # Best fit: the fullest GPUs that still fit, keeping emptier ones whole for big jobs.
        candidates.sort(key=lambda i: (board.free_mb(i), i))
    chosen = tuple(candidates[: request.gpus])
    if request.gpus > 1 and topology and len(candidates) > request.gpus:
        # Sets come in best-fit order, so the first of the closest sets is also the best fit.
        sets = itertools.islice(itertools.combinations(candidates, request.gpus), MAX_SETS)
        chosen = min(sets, key=lambda s: spread(s, topology))
    return tuple(sorted(chosen))


def _wait_reason(board: _Board, request: Request) -> str:
    need = "whole" if request.memory_mb is None else f"with {request.memory_mb} MiB free"
    if request.gpu_ids is not None:
        which = ", ".join(str(i) for i in request.gpu_ids)
        blocked = [
            board.describe(i) for i in request.gpu_ids if not board.fits(i, request.memory_mb)
        ]
        return f"waiting for GPUs {which} {need}; " + "; ".join(blocked)
    noun = "GPU" if request.gpus == 1 else "GPUs"
    state = "; ".join(board.describe(i) for i in sorted(board.gpus))
    return f"waiting for {request.gpus} {noun} {need}; {state}"


def plan(
    queue: Sequence[Request],
    gpus: Sequence[GpuSlot],
    allocations: Sequence[Held],
    cpu_slots: int = 0,
    topology: Topology | None = None,
) -> Plan:
    """Decides which queued jobs start now and on which GPUs; says why the others wait."""
    board = _Board(gpus, allocations)
    result = Plan()
    blocker: Request | None = None
    for request in order(queue):
        if request.gpus == 0:
            if cpu_slots > 0:
                cpu_slots -= 1
                result.placements.append(Placement(request.job_id, (), None))
            else:
                result.waiting[request.job_id] = "waiting for a CPU job slot"
            continue
        if blocker is not None:
            result.waiting[request.job_id] = (
                f"waiting behind job {blocker.job_id}, which starts first"
            )
            continue
        chosen = _choose(board, request, topology or {})
        if chosen is None:
            result.waiting[request.job_id] = _wait_reason(board, request)
            blocker = request
            continue
        board.take(request.job_id, chosen, request.memory_mb)
        result.placements.append(Placement(request.job_id, chosen, request.memory_mb))
    return result


@dataclass
class PlanInputs:
    """Everything `plan` reads, gathered by the scheduler in one place."""

    queue: list[Request]
    gpus: list[GpuSlot]
    allocations: list[Held]
    cpu_slots: int = 0
    topology: Topology = field(default_factory=dict)

    def plan(self) -> Plan:
        return plan(self.queue, self.gpus, self.allocations, self.cpu_slots, self.topology)
