"""A GPU's lifecycle: which changes of its state (`contract.states.GpuState`, a word the
API shows) are allowed; the gate is `registry.change_state`."""

from gpuq.contract.states import GpuState

#: target state -> the stored states it may be reached from
ALLOWED_FROM: dict[GpuState, frozenset[GpuState]] = {
    GpuState.free: frozenset({GpuState.draining, GpuState.quarantined}),
    GpuState.draining: frozenset({GpuState.free}),
    GpuState.quarantined: frozenset({GpuState.draining}),
    GpuState.in_use: frozenset(),  # derived from allocations, never set
}

__all__ = ["ALLOWED_FROM", "GpuState"]
