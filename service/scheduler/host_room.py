"""The box's CPU cores and host memory as a plan hands them out: pure, beside `occupancy`
(the GPUs' side).

A job on this box holds the `cpus` and `host_memory_mb` it got at submit from its start
to its end (None holds nothing); a queued job starts only if what it asks fits in what
the running jobs and the plan's earlier placements leave free (`HostSize`: the box's
less gpuq's reserve). Once a GPU job is blocked (the plan's *head*), `RoomLeft` also
keeps what the head leaves spare at its reserved start: a job behind it that would
still run then may take only that, so that backfill never delays the head for cores or
host memory either.

Under an executor with a queue of its own (Slurm) nothing here is counted: Slurm's own
scheduler weighs its nodes' cores and memory.
"""

import math
from dataclasses import dataclass
from typing import Protocol

from service.usage.efficiency import memory_amount

#: Cores are floats (0.5, 0.1 + 0.2): what differs by less than this fits.
SLACK = 1e-6


class HostAsks(Protocol):
    """What a job asks of the box (a `placement.Request`)."""

    @property
    def job_id(self) -> int: ...
    @property
    def cpus(self) -> float | None: ...
    @property
    def host_memory_mb(self) -> int | None: ...


@dataclass(frozen=True)
class Hold:
    """What a running job holds of the box, until when at the latest (time limit plus
    grace; None if unbounded)."""

    job_id: int
    cpus: float
    memory_mb: int
    ends_at: float | None = None


@dataclass(frozen=True)
class HostRoom:
    """What a plan reads of the box: the cores and host memory it gives jobs, and what
    the jobs running on it hold."""

    cpus: float
    memory_mb: int
    holds: tuple[Hold, ...] = ()

    def free(self) -> tuple[float, int]:
        """Cores and host memory free now."""
        return (
            self.cpus - sum(h.cpus for h in self.holds),
            self.memory_mb - sum(h.memory_mb for h in self.holds),
        )


def fits_in(request: HostAsks, cpus: float, memory_mb: float) -> bool:
    """Whether `request`'s cores and host memory fit in `cpus` and `memory_mb`."""
    need_cpus, need_mb = request.cpus or 0.0, request.host_memory_mb or 0
    return need_cpus <= cpus + SLACK and need_mb <= memory_mb


class RoomLeft:
    """The box's room as one plan goes down the queue: free now, and, once a head is
    reserved, what it leaves spare at its start."""

    def __init__(self, room: HostRoom) -> None:
        self.cpus, self.memory_mb = room.cpus, room.memory_mb
        self.holds = list(room.holds)
        self.free_cpus, self.free_mb = room.free()
        #: the head's reserved start; None while no job is blocked
        self.head_start: float | None = None
        self.spare_cpus: float = math.inf  #: what the head leaves at its start
        self.spare_mb: float = math.inf

    def fits(self, request: HostAsks) -> bool:
        """Whether `request` fits in what is free now."""
        return fits_in(request, self.free_cpus, self.free_mb)

    def take(self, request: HostAsks, ends_at: float | None) -> None:
        """`request` starts now and holds its share until `ends_at`."""
        cpus, memory_mb = request.cpus or 0.0, request.host_memory_mb or 0
        if not (cpus or memory_mb):
            return
        self.free_cpus -= cpus
        self.free_mb -= memory_mb
        self.holds.append(Hold(request.job_id, cpus, memory_mb, ends_at))
        if self.head_start is not None and not _ends_by(ends_at, self.head_start):
            self.spare_cpus -= cpus
            self.spare_mb -= memory_mb

    def ends(self) -> set[float]:
        """When holds end (those with a bound)."""
        return {h.ends_at for h in self.holds if h.ends_at is not None}

    def free_at(self, ended: float) -> tuple[float, int]:
        """Cores and host memory free once every hold ending by `ended` is gone (inf:
        every hold)."""
        kept = [h for h in self.holds if _stays(h, ended)]
        return (
            self.cpus - sum(h.cpus for h in kept),
            self.memory_mb - sum(h.memory_mb for h in kept),
        )

    def fits_at(self, request: HostAsks, ended: float) -> bool:
        """Whether `request` fits once every hold ending by `ended` is gone."""
        if not (request.cpus or request.host_memory_mb):
            return True
        return fits_in(request, *self.free_at(ended))

    def reserve(self, head: HostAsks, start: float) -> None:
        """The head starts at `start` at the latest: what it leaves spare then is all a
        job behind it that runs past `start` may take."""
        self.head_start = start
        free_cpus, free_mb = self.free_at(start)
        if head.cpus:
            self.spare_cpus = free_cpus - head.cpus
        if head.host_memory_mb:
            self.spare_mb = free_mb - head.host_memory_mb

    def delays_head(self, request: HostAsks, ends_at: float | None) -> bool:
        """Whether `request`, started now until `ends_at`, could push the head's start
        back: it runs past that start and takes more than the head leaves spare."""
        if self.head_start is None or not (request.cpus or request.host_memory_mb):
            return False
        if _ends_by(ends_at, self.head_start):
            return False
        return not fits_in(request, self.spare_cpus, self.spare_mb)

    def wait_reason(self, request: HostAsks) -> str:
        """`8 cores; 3 free`, `32 GiB of host memory; 12 GiB free`, or both joined by
        `; and for `: what `request` waits for of the box (after `waiting for `)."""
        parts = []
        need = request.cpus or 0.0
        if need > self.free_cpus + SLACK:
            noun = "core" if need == 1 else "cores"
            parts.append(f"{cores(need)} {noun}; {cores(max(0.0, self.free_cpus))} free")
        need_mb = request.host_memory_mb or 0
        if need_mb > self.free_mb:
            free = memory_amount(max(0, int(self.free_mb)))
            parts.append(f"{memory_amount(need_mb)} of host memory; {free} free")
        return "; and for ".join(parts)


def cores(count: float) -> str:
    """`8`, `0.5`, `2.25`: cores as a person writes them."""
    return f"{round(count, 2):g}"


def _ends_by(ends_at: float | None, start: float) -> bool:
    """Whether a hold until `ends_at` is gone by `start` (a finite one)."""
    return ends_at is not None and ends_at <= start < math.inf


def _stays(hold: Hold, ended: float) -> bool:
    return hold.ends_at > ended if hold.ends_at is not None else ended != math.inf
