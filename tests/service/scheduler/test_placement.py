import math

from hypothesis import given, settings
from hypothesis import strategies as st

from service.scheduler.placement import Claim, GpuSlot, Request, order, plan
from service.scheduler.reservation import earliest_start

GPUS = [GpuSlot(0, 8192), GpuSlot(1, 8192)]
POLICIES = ("balanced", "pack", "spread")


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


def test_pack_prefers_the_fuller_gpu():
    held = [Claim(9, 1, 6000)]
    result = plan([Request(1, 0, 1, None, 2000)], GPUS, held, placement="pack")
    assert result.placements[0].gpu_indices == (1,)


def test_whole_gpu_job_does_not_share():
    held = [Claim(9, 0, 1000)]
    result = plan([Request(1, 0, 2)], GPUS, held)
    assert not result.placements
    assert "GPU 0 has 7192 MiB free" in result.waiting[1]


def test_nothing_shares_a_whole_gpu():
    held = [Claim(9, 0, None), Claim(8, 1, None)]
    result = plan([Request(1, 0, 1, None, 100)], GPUS, held)
    assert "GPU 0 is held whole by job 9" in result.waiting[1]


def test_foreign_memory_is_subtracted():
    gpus = [GpuSlot(0, 8192, foreign_mb=6000)]
    result = plan([Request(1, 0, 1, None, 4000)], gpus, [])
    assert result.waiting[1].endswith("GPU 0 has 2192 MiB free")


def test_a_blocked_gpu_job_holds_back_later_gpu_jobs_but_not_cpu_jobs():
    queue = [Request(1, 0, 2), Request(2, 0, 1), Request(3, 0, 0)]
    result = plan(queue, GPUS, [Claim(9, 0, None)], cpu_slots=1)
    assert [p.job_id for p in result.placements] == [3]
    assert result.waiting[2] == (
        "waiting behind job 1, which starts first "
        "(a job with a time_limit_s could use idle GPUs meanwhile)"
    )


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
    held=st.lists(
        st.builds(
            Claim,
            job_id=st.integers(20_000, 30_000),
            gpu_index=st.integers(0, 3),
            memory_mb=st.integers(500, 4000),
        ),
        max_size=4,
        unique_by=lambda h: h.job_id,
    ),
    policy=st.sampled_from(POLICIES),
)
def test_no_gpu_is_ever_overcommitted(queue, totals, foreign, held, policy):
    gpus = [GpuSlot(i, t, foreign_mb=foreign if i == 0 else 0) for i, t in enumerate(totals)]
    # What runs already fits, as the scheduler's own claims always do.
    room = {g.index: max(0, g.memory_total_mb - g.foreign_mb) for g in gpus}
    running = []
    for claim in held:
        if room.get(claim.gpu_index, 0) >= (claim.memory_mb or 0):
            room[claim.gpu_index] -= claim.memory_mb or 0
            running.append(claim)
    result = plan(queue, gpus, running, cpu_slots=2, placement=policy)
    by_id = {r.job_id: r for r in queue}
    for gpu in gpus:
        on_it = [p for p in result.placements if gpu.index in p.gpu_indices]
        before = [c for c in running if c.gpu_index == gpu.index]
        if any(p.memory_mb is None for p in on_it):
            assert len(on_it) == 1 and not before, "a whole-GPU job shared its GPU"
        else:
            assert sum(p.memory_mb or 0 for p in on_it) <= room[gpu.index]
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
    held = [Claim(9, 0, None)]
    result = plan([Request(1, 0, 2)], FOUR, held, topology=NVLINKED)
    assert result.placements[0].gpu_indices == (1, 3)


def test_without_topology_the_lowest_indices_are_used():
    assert plan([Request(1, 0, 2)], FOUR, []).placements[0].gpu_indices == (0, 1)


def test_draining_and_quarantined_gpus_take_nothing():
    gpus = [GpuSlot(0, 8192, unavailable="draining after job 4"), GpuSlot(1, 8192)]
    result = plan([Request(1, 0, 2), Request(2, 0, 1, None, 100)], gpus, [])
    assert "GPU 0 is draining after job 4" in result.waiting[1]
    assert result.waiting[2] == (
        "waiting behind job 1, which starts first "
        "(a job with a time_limit_s could use idle GPUs meanwhile)"
    )


@settings(max_examples=200, deadline=None)
@given(
    ids=st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True),
    memory=st.one_of(st.none(), st.integers(1, 8192)),
    held_gpu=st.integers(0, 3),
)
def test_explicit_gpu_ids_are_honoured_or_the_job_waits(ids, memory, held_gpu):
    held = [Claim(9, held_gpu, 4096)]
    result = plan([Request(1, 0, len(ids), tuple(ids), memory)], FOUR, held, topology=NVLINKED)
    if result.placements:
        assert result.placements[0].gpu_indices == tuple(ids)
    else:
        assert held_gpu in ids
        assert result.waiting[1].startswith("waiting for GPUs " + ", ".join(map(str, ids)))


# --- fair share, quotas, backfill --------------------------------------------------------


def test_a_light_user_goes_before_a_heavy_one_at_equal_priority():
    queue = [
        Request(1, 0, 1, owner="heavy"),
        Request(2, 0, 1, owner="light"),
        Request(3, 0, 1, owner="heavy"),
        Request(4, 5, 1, owner="heavy"),
    ]
    held = [Claim(9, 0, None)]  # one GPU free
    result = plan(queue, GPUS, held, usage={"heavy": 9000.0, "light": 10.0})
    assert [p.job_id for p in result.placements] == [4]
    result = plan(queue[:3], GPUS, held, usage={"heavy": 9000.0, "light": 10.0})
    assert [p.job_id for p in result.placements] == [2], "light user before heavy's older job"
    result = plan(queue[:3], GPUS, held, usage={})
    assert [p.job_id for p in result.placements] == [1], "no usage: submission order"


@given(
    st.lists(st.tuples(st.integers(-2, 2), st.sampled_from(["ana", "bo", "cy"])), max_size=30),
    st.dictionaries(st.sampled_from(["ana", "bo", "cy"]), st.sampled_from([0.0, 10.0, 9000.0])),
)
@settings(max_examples=300, deadline=None)
def test_the_queues_order_is_priority_then_usage_then_submission(jobs, usage):
    """Whatever the usage (none, every owner alike, or owners apart), the order is the
    one the docs give, including where `order` takes its quicker path."""
    queue = [Request(n, priority, 1, owner=owner) for n, (priority, owner) in enumerate(jobs, 1)]
    queue.reverse()  # not in submission order already
    expected = sorted(queue, key=lambda r: (-r.priority, usage.get(r.owner, 0.0), r.job_id))
    assert [r.job_id for r in order(queue, usage)] == [r.job_id for r in expected]


def test_a_job_over_its_owners_gpu_quota_waits_without_blocking_others():
    queue = [Request(1, 0, 2, owner="ana"), Request(2, 0, 1, owner="bo")]
    result = plan(queue, GPUS, [], running_gpus={"ana": 1}, max_gpus_running=2)
    assert result.waiting[1] == (
        "over quota: ana already runs 1 GPU(s) and may run 2 (max_gpus_running)"
    )
    assert [p.job_id for p in result.placements] == [2]


def test_jobs_placed_in_one_plan_count_against_the_quota():
    queue = [Request(1, 0, 1, owner="ana"), Request(2, 0, 1, owner="ana")]
    result = plan(queue, GPUS, [], max_gpus_running=1)
    assert [p.job_id for p in result.placements] == [1]
    assert result.waiting[2].startswith("over quota: ana already runs 1 GPU(s)")


def test_a_short_job_backfills_when_it_ends_before_the_head_can_start():
    # GPU 0 is held until t=100; the head needs all four GPUs, so it starts at 100 at best.
    held = [Claim(9, 0, None, ends_at=100.0)]
    queue = [
        Request(1, 0, 4),
        Request(2, 0, 1, time_limit_s=50),
        Request(3, 0, 1, time_limit_s=500),
    ]
    result = plan(queue, FOUR, held, now=0.0, grace_s=10)
    assert [(p.job_id, p.backfill) for p in result.placements] == [(2, True)]
    assert result.waiting[3] == "waiting behind job 1, which starts first; this job could delay it"


def test_a_job_may_backfill_on_gpus_the_head_will_not_use():
    held = [Claim(9, 0, None, ends_at=100.0)]
    head = Request(1, 0, 1, gpu_ids=(0,))
    long_job = Request(2, 0, 1, time_limit_s=10_000)
    result = plan([head, long_job], GPUS, held, now=0.0)
    assert [(p.job_id, p.gpu_indices) for p in result.placements] == [(2, (1,))]


def test_nothing_backfills_ahead_of_a_head_whose_start_is_unknown():
    held = [Claim(9, 0, None, ends_at=None)]  # a running job without a time limit
    queue = [Request(1, 0, 2), Request(2, 0, 1, time_limit_s=1)]
    result = plan(queue, GPUS, held, now=0.0)
    assert result.placements == []


requests_with_limits = st.builds(
    Request,
    job_id=st.integers(1, 10_000),
    priority=st.integers(-1, 1),
    gpus=st.integers(1, 3),
    gpu_ids=st.none(),
    memory_mb=st.one_of(st.none(), st.integers(1000, 8000)),
    owner=st.sampled_from(["ana", "bo", "cy"]),
    time_limit_s=st.one_of(st.none(), st.floats(1, 1000)),
)
holds = st.lists(
    st.builds(
        Claim,
        job_id=st.integers(20_000, 30_000),
        gpu_index=st.integers(0, 3),
        memory_mb=st.one_of(st.none(), st.integers(500, 4000)),
        ends_at=st.one_of(st.none(), st.floats(1, 2000)),
    ),
    max_size=4,
    unique_by=lambda h: h.gpu_index,
)


@settings(max_examples=400, deadline=None)
@given(
    queue=st.lists(requests_with_limits, max_size=10, unique_by=lambda r: r.job_id),
    held=holds,
    policy=st.sampled_from(POLICIES),
)
def test_backfill_never_delays_the_head_job(queue, held, policy):
    gpus = [GpuSlot(i, 8192) for i in range(4)]
    grace = 5.0
    result = plan(queue, gpus, held, now=0.0, grace_s=grace, topology=NVLINKED, placement=policy)
    by_id = {r.job_id: r for r in queue}

    def as_holds(placements):
        return [
            Claim(
                p.job_id,
                g,
                p.memory_mb,
                None
                if by_id[p.job_id].time_limit_s is None
                else by_id[p.job_id].time_limit_s + grace,
            )
            for p in placements
            for g in p.gpu_indices
        ]

    regular = [p for p in result.placements if not p.backfill]
    backfilled = [p for p in result.placements if p.backfill]
    waiting = [
        r
        for r in queue
        if r.job_id in result.waiting and "over quota" not in result.waiting[r.job_id]
    ]
    if not waiting or not backfilled:
        return
    head = next(
        r
        for r in sorted(queue, key=lambda r: (-r.priority, r.job_id))
        if r.job_id in result.waiting
        and r.job_id in {w.job_id for w in waiting}
        and not result.waiting[r.job_id].startswith("waiting behind")
    )
    without = earliest_start(head, gpus, [*held, *as_holds(regular)], NVLINKED)
    with_backfill = earliest_start(head, gpus, [*held, *as_holds(result.placements)], NVLINKED)
    assert with_backfill.start <= without.start
    if without.start == math.inf and without.gpus is not None:
        used = {g for p in backfilled for g in p.gpu_indices}
        assert not used & set(without.gpus), "a backfill took a GPU of an unbounded head"


def test_a_sweep_runs_at_most_max_parallel_members_and_others_pass_them():
    gpus = [GpuSlot(i, 8192) for i in range(4)]
    queue = [Request(i, 0, 1, sweep_id=7) for i in (1, 2, 3)] + [Request(4, 0, 1)]
    result = plan(queue, gpus, [], sweep_limits={7: 2}, sweep_running={7: 1})
    assert sorted(p.job_id for p in result.placements) == [1, 4]
    assert result.waiting[2] == "sweep 7 already runs 2 member(s), its max_parallel"
    assert result.waiting[3] == result.waiting[2]
    # CPU members count too, and a sweep with no limit takes what fits.
    cpu = [Request(i, 0, 0, sweep_id=8) for i in (5, 6)]
    assert len(plan(cpu, gpus, [], cpu_slots=2, sweep_limits={8: 1}).placements) == 1
    assert len(plan(cpu, gpus, [], cpu_slots=2).placements) == 2
