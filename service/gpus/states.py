"""A GPU's lifecycle: its states and which changes are allowed (the gate is
`registry.change_state`)."""

from enum import StrEnum


class GpuState(StrEnum):
    free = "free"  #: may be placed on (shown as `in_use` while jobs hold allocations)
    in_use = "in_use"  #: never stored: a free GPU that jobs are placed on
    draining = "draining"  #: a job ended here; waiting for its processes and memory to go
    quarantined = "quarantined"  #: they did not go in time; an admin must release it


#: target state -> the stored states it may be reached from
ALLOWED_FROM: dict[GpuState, frozenset[GpuState]] = {
    GpuState.free: frozenset({GpuState.draining, GpuState.quarantined}),
    GpuState.draining: frozenset({GpuState.free}),
    GpuState.quarantined: frozenset({GpuState.draining}),
    GpuState.in_use: frozenset(),  # derived from allocations, never set
}
