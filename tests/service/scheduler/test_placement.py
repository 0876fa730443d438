from hypothesis import given, settings
from hypothesis import strategies as st

from service.scheduler.placement import GpuSlot, Held, Request, plan

GPUS = [GpuSlot(0, 8192), GpuSlot(1, 8192)]


def test_two_single_gpu_jobs_take_one_gpu_each_and_a_third_waits():
    queue = [Request(1, 0, 1), Request(2, 0, 1), Request(3, 0, 1)]
    result = plan(queue, GPUS, [])
    assert {p.job_id: p.gpu_indices for p in result.placements} == {1: (0,), 2: (1,)}
    assert result.waiting[3].startswith("waiting for 1 GPU whole")


def test_priority_goes_first_then_submission_order():
    queue = [Request(1, 0, 1), Request(2, 5, 1), Request(3, 5, 1)]
    placed = [p.job_id for p in plan(queue, GPUS, []).placements]
    assert placed == [2, 3]


def test_shared_jobs_pack_by_declared_memory():
    queue = [
        Request(1, 0, 1, (0,), 5000),
        Request(2, 0, 1, (0,), 3000),
        Request(3, 0, 1, (0,), 4000),
    ]
    result = plan(queue, GPUS, [])
    assert [p.job_id for p in result.placements] == [1, 2]
    assert result.waiting[3] == "waiting for GPUs 0 with 4000 MiB free; GPU 0 has 192 MiB free"


def test_best_fit_prefers_the_fuller_gpu():
    held = [Held(9, 1, 6000)]
    result = plan([Request(1, 0, 1, None, 2000)], GPUS, held)
    assert result.placements[0].gpu_indices == (1,)


def test_whole_gpu_job_does_not_share():
    held = [Held(9, 0, 1000)]
    result = plan([Request(1, 0, 2)], GPUS, held)
    assert not result.placements
    assert "GPU 0 has 7192 MiB free" in result.waiting[1]


def test_nothing_shares_a_whole_gpu():
    held = [Held(9, 0, None), Held(8, 1, None)]
    result = plan([Request(1, 0, 1, None, 100)], GPUS, held)
    assert "GPU 0 is held whole by job 9" in result.waiting[1]


def test_foreign_memory_is_subtracted():
    gpus = [GpuSlot(0, 8192, foreign_mb=6000)]
    result = plan([Request(1, 0, 1, None, 4000)], gpus, [])
    assert result.waiting[1].endswith("GPU 0 has 2192 MiB free")


def test_a_blocked_gpu_job_holds_back_later_gpu_jobs_but_not_cpu_jobs():
    queue = [Request(1, 0, 2), Request(2, 0, 1), Request(3, 0, 0)]
    result = plan(queue, GPUS, [Held(9, 0, None)], cpu_slots=1)
    assert [p.job_id for p in result.placements] == [3]
    assert result.waiting[2] == "waiting behind job 1, which starts first"


def test_cpu_jobs_are_bounded_by_slots():
    queue = [Request(1, 0, 0), Request(2, 0, 0)]
    result = plan(queue, GPUS, [], cpu_slots=1)
    assert [p.job_id for p in result.placements] == [1]
    assert result.waiting[2] == "waiting for a CPU job slot"


requests = st.builds(
    Request,
    job_id=st.integers(1, 10_000),
    priority=st.integers(-2, 2),
    gpus=st.integers(0, 3),
    gpu_ids=st.none(),
    memory_mb=st.one_of(st.none(), st.integers(1, 9000)),
)


@settings(max_examples=300, deadline=None)
@given(
    queue=st.lists(requests, max_size=12, unique_by=lambda r: r.job_id),
    totals=st.lists(st.integers(1024, 16384), min_size=1, max_size=4),
    foreign=st.integers(0, 2000),
)
def test_no_gpu_is_ever_overcommitted(queue, totals, foreign):
    gpus = [GpuSlot(i, t, foreign_mb=foreign if i == 0 else 0) for i, t in enumerate(totals)]
    result = plan(queue, gpus, [], cpu_slots=2)
    by_id = {r.job_id: r for r in queue}
    for gpu in gpus:
        on_it = [p for p in result.placements if gpu.index in p.gpu_indices]
        if any(p.memory_mb is None for p in on_it):
            assert len(on_it) == 1, "a whole-GPU job shared its GPU"
        else:
            assert sum(p.memory_mb or 0 for p in on_it) <= max(
                0, gpu.memory_total_mb - gpu.foreign_mb
            )
    for p in result.placements:
        assert len(p.gpu_indices) == by_id[p.job_id].gpus
        assert len(set(p.gpu_indices)) == len(p.gpu_indices)
    assert set(result.waiting) | {p.job_id for p in result.placements} == set(by_id)


# NVLink pairs 0-2 and 1-3; every other pair only meets across NUMA nodes.
FOUR = [GpuSlot(i, 8192) for i in range(4)]
NVLINKED = {(0, 1): 50, (0, 2): 0, (0, 3): 50, (1, 2): 50, (1, 3): 0, (2, 3): 50}


def test_a_two_gpu_job_gets_an_nvlinked_pair():
    result = plan([Request(1, 0, 2)], FOUR, [], topology=NVLINKED)
    assert result.placements[0].gpu_indices == (0, 2)


def test_the_closest_free_pair_wins_when_the_best_is_taken():
    held = [Held(9, 0, None)]
    result = plan([Request(1, 0, 2)], FOUR, held, topology=NVLINKED)
    assert result.placements[0].gpu_indices == (1, 3)


def test_without_topology_the_lowest_indices_are_used():
    assert plan([Request(1, 0, 2)], FOUR, []).placements[0].gpu_indices == (0, 1)


def test_draining_and_quarantined_gpus_take_nothing():
    gpus = [GpuSlot(0, 8192, unavailable="draining after job 4"), GpuSlot(1, 8192)]
    result = plan([Request(1, 0, 2), Request(2, 0, 1, None, 100)], gpus, [])
    assert "GPU 0 is draining after job 4" in result.waiting[1]
    assert result.waiting[2] == "waiting behind job 1, which starts first"


@settings(max_examples=200, deadline=None)
@given(
    ids=st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True),
    memory=st.one_of(st.none(), st.integers(1, 8192)),
    held_gpu=st.integers(0, 3),
)
def test_explicit_gpu_ids_are_honoured_or_the_job_waits(ids, memory, held_gpu):
    held = [Held(9, held_gpu, 4096)]
    result = plan([Request(1, 0, len(ids), tuple(ids), memory)], FOUR, held, topology=NVLINKED)
    if result.placements:
        assert result.placements[0].gpu_indices == tuple(ids)
    else:
        assert held_gpu in ids
        assert result.waiting[1].startswith("waiting for GPUs " + ", ".join(map(str, ids)))
