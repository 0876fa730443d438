"""A GPU's state changes only through `registry.change_state`, along its table."""

import pytest
from sqlalchemy import text

from gpuq.contract.states import GpuState
from service.gpus import registry
from service.gpus.inventory import discover
from service.gpus.registry import GpuRegistry, change_state
from service.store.tables import Allocation, Gpu, Job
from service.team import audit


@pytest.fixture
def gpus(db, settings):
    inventory = discover(settings.gpus)
    registry.sync(db, inventory)
    return GpuRegistry(db, inventory)


def state(db, index: int) -> Gpu:
    with db.read() as session:
        gpu = session.get(Gpu, index)
        assert gpu is not None
        return gpu


def move(db, index: int, to: GpuState, **values) -> bool:
    with db.write() as session:
        return change_state(session, index, to, **values)


def test_a_gpu_drains_then_is_free_or_quarantined(db, gpus):
    assert state(db, 0).state == GpuState.free
    assert move(db, 0, GpuState.draining, drain_job_id=7, drain_pids=[11])
    assert (state(db, 0).drain_job_id, state(db, 0).drain_pids) == (7, [11])
    assert move(db, 0, GpuState.quarantined, state_reason="512 MiB still held")
    assert state(db, 0).state_reason == "512 MiB still held"
    assert move(db, 0, GpuState.free)
    freed = state(db, 0)
    assert (freed.state, freed.state_reason, freed.drain_job_id, freed.drain_pids) == (
        GpuState.free,
        None,
        None,
        [],
    )


@pytest.mark.parametrize(
    ("start", "to"),
    [
        (GpuState.free, GpuState.free),
        (GpuState.free, GpuState.quarantined),
        (GpuState.free, GpuState.in_use),
        (GpuState.draining, GpuState.draining),
        (GpuState.quarantined, GpuState.draining),
        (GpuState.quarantined, GpuState.quarantined),
    ],
)
def test_transitions_the_table_does_not_list_are_refused(db, gpus, start, to):
    with db.write() as session:
        session.execute(text('UPDATE gpu SET state = :s WHERE "index" = 1'), {"s": start.name})
    assert not move(db, 1, to)
    assert state(db, 1).state == start


def test_releasing_a_gpu_that_is_not_held_back_is_refused_and_leaves_no_audit(db, gpus):
    assert not gpus.release(0, actor="root")
    assert audit.entries(db, limit=10)[0] == []
    move(db, 0, GpuState.draining, drain_job_id=3)
    assert gpus.release(0, actor="root")
    assert state(db, 0).state == GpuState.free
    [entry] = audit.entries(db, limit=10)[0]
    assert (entry.actor, entry.action, entry.target) == ("root", "gpu_release", "gpu/0")


def test_the_public_state_of_a_free_gpu_with_allocations_is_in_use(db, gpus):
    with db.write() as session:
        session.add(Job(name="j", owner="ana", spec={}, gpu_count=1))
        session.flush()
        session.add(Allocation(job_id=1, gpu_index=0, memory_mb=1024))
    views = {g.index: g.state for g in gpus.describe(set())}
    assert views == {0: GpuState.in_use, 1: GpuState.free}
