"""What a plan is asked and what it answers: each queued job's placement request
(`Request`), where a job goes (`Placement`), the plan (`Plan`), and the order the queue is
considered in (`order`)."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter


@dataclass(frozen=True)
class Request:
    job_id: int
    priority: int
    gpus: int
    gpu_ids: tuple[int, ...] | None = None
    memory_mb: int | None = None  #: None: whole GPUs
    owner: str = ""
    time_limit_s: float | None = None
    sweep_id: int | None = None  #: the sweep it is a member of
    cpus: float | None = None  #: cores it holds while it runs (None: none)
    host_memory_mb: int | None = None  #: host memory it holds while it runs (None: none)
    reservation: str | None = None  #: the reservation it names (None: none)
    #: its place when every owner weighs the same: priority (higher earlier), then
    #: submission, in one int (which sorts quicker than a tuple)
    rank: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rank", -self.priority * ID_SPAN + self.job_id)


@dataclass(frozen=True)
class Placement:
    job_id: int
    gpu_indices: tuple[int, ...]
    memory_mb: int | None
    backfill: bool = False  #: started ahead of a blocked head job
    why: str = ""  #: why these GPUs: "GPU 1: idle", "GPU 0: beside job 7 to keep ..."


@dataclass
class Plan:
    placements: list[Placement] = field(default_factory=list)
    waiting: dict[int, str] = field(default_factory=dict)  #: job id → human reason
    #: the first GPU job that cannot start, for its GPUs or its share of the box as they
    #: are now (what preemption serves)
    head: Request | None = None


def order(queue: Sequence[Request], usage: Mapping[str, float] | None = None) -> list[Request]:
    """Priority first (higher earlier), then the owner's recent usage, then submission.

    A long queue is sorted at every plan, so the key is one int a job: made once per job
    and read in C where usage orders no one (one owner, CPU jobs, no GPU used lately),
    else the owners' places among the distinct usages folded in."""
    usage = usage or {}
    owners = set(map(_OWNER, queue)) if usage else set()
    weights = sorted({usage.get(owner, 0.0) for owner in owners})
    if len(weights) <= 1:
        return sorted(queue, key=_RANK)
    place = {owner: weights.index(usage.get(owner, 0.0)) for owner in owners}
    width = len(weights)
    return sorted(queue, key=lambda r: (place[r.owner] - r.priority * width) * ID_SPAN + r.job_id)


#: above every job id (a dry run's `PREVIEW_ID` is 2**62)
ID_SPAN = 2**64
_OWNER = attrgetter("owner")
_RANK = attrgetter("rank")
