"""Placement by the box's CPU cores and host memory as well as its GPUs (issue 49): what a
job waits for, backfill that never delays the head for cores or memory, and no plan that
hands out more than is free."""

from hypothesis import given, settings
from hypothesis import strategies as st

from service.scheduler.host_room import SLACK, Hold, HostRoom
from service.scheduler.placement import Claim, GpuSlot, Request, order, plan
from service.scheduler.reservation import earliest_start

GPUS = [GpuSlot(0, 8192), GpuSlot(1, 8192)]
GIB = 1024


def box(cpus: float = 4, memory_mb: int = 64 * GIB, *holds: Hold) -> HostRoom:
    return HostRoom(cpus, memory_mb, holds)


def placed(result) -> list[int]:
    return [p.job_id for p in result.placements]


def test_a_job_waits_for_the_cores_it_asks_and_says_how_many_are_free():
    queue = [Request(1, 0, 1, cpus=3), Request(2, 0, 1, cpus=2)]
    result = plan(queue, GPUS, [], room=box(4))
    assert placed(result) == [1]
    assert result.waiting[2] == "waiting for 2 cores; 1 free"
    assert result.head is not None and result.head.job_id == 2


def test_a_job_waits_for_host_memory_in_gib():
    running = Hold(9, 0.0, 52 * GIB)
    result = plan(
        [Request(1, 0, 1, host_memory_mb=32 * GIB)], GPUS, [], room=box(4, 64 * GIB, running)
    )
    assert result.waiting[1] == "waiting for 32 GiB of host memory; 12 GiB free"


def test_a_job_short_of_both_names_both_and_of_its_gpus_too():
    full = box(8, 16 * GIB, Hold(9, 7.5, 15 * GIB))
    result = plan([Request(1, 0, 1, cpus=1, host_memory_mb=2 * GIB)], GPUS, [], room=full)
    assert result.waiting[1] == (
        "waiting for 1 core; 0.5 free; and for 2 GiB of host memory; 1 GiB free"
    )
    held = [Claim(8, 0, None), Claim(8, 1, None)]
    result = plan([Request(1, 0, 1, cpus=8.5)], GPUS, held, room=full)
    assert result.waiting[1] == (
        "waiting for 1 GPU whole; GPU 0 is held whole by job 8; GPU 1 is held whole by job 8"
        "; and for 8.5 cores; 0.5 free"
    )


def test_jobs_that_ask_no_cores_never_wait_for_them():
    queue = [Request(1, 0, 1, cpus=4), Request(2, 0, 1), Request(3, 0, 0)]
    result = plan(queue, GPUS, [], cpu_slots=1, room=box(4))
    assert placed(result) == [1, 2, 3]


def test_a_cpu_job_waits_for_cores_after_its_slot_and_holds_no_one_back():
    queue = [Request(1, 0, 0, cpus=3), Request(2, 0, 0, cpus=2), Request(3, 0, 1, cpus=1)]
    result = plan(queue, GPUS, [], cpu_slots=2, room=box(4))
    assert placed(result) == [1, 3]
    assert result.waiting[2] == "waiting for 2 cores; 1 free"
    assert result.head is None  # a CPU-only job is never the head
    result = plan(queue[:2], GPUS, [], cpu_slots=1, room=box(4))
    assert result.waiting[2] == "waiting for a CPU job slot"


def test_fractional_cores_add_up_exactly_enough():
    queue = [Request(i, 0, 0, cpus=0.1) for i in range(1, 4)] + [Request(4, 0, 0, cpus=0.7)]
    assert placed(plan(queue, GPUS, [], cpu_slots=4, room=box(1.0))) == [1, 2, 3, 4]


def test_a_job_that_ends_before_the_head_can_start_backfills_into_its_cores():
    # 3 of 4 cores are held until t=100: the head (4 cores) starts then at the earliest.
    running = Hold(9, 3, 0, ends_at=100.0)
    queue = [
        Request(1, 0, 1, cpus=4),
        Request(2, 0, 1, cpus=1, time_limit_s=50),
        Request(3, 0, 0, cpus=1, time_limit_s=50),
    ]
    result = plan(queue, GPUS, [], cpu_slots=1, now=0.0, grace_s=10, room=box(4, 1024, running))
    assert [(p.job_id, p.backfill) for p in result.placements] == [(2, True)]
    assert result.waiting[1] == "waiting for 4 cores; 1 free"
    assert result.waiting[3] == "waiting for 1 core; 0 free"  # job 2 took the last one


def test_a_job_behind_the_head_may_take_only_the_cores_the_head_leaves_spare():
    # 10 cores, 5 held until t=100; the head asks 7 (on GPU 1, so that its GPU is no one
    # else's): it starts at 100 and leaves 3 spare then; 5 are free now.
    running = Hold(9, 5, 0, ends_at=100.0)
    room = box(10, 1024, running)
    queue = [
        Request(1, 0, 1, gpu_ids=(1,), cpus=7),
        Request(2, 0, 1, cpus=4, time_limit_s=1000),  # fits now, but not in the spare
        Request(3, 0, 0, cpus=2, time_limit_s=1000),  # fits in the spare: 1 left
        Request(4, 0, 0, cpus=1, time_limit_s=20),  # ends by 100: takes none of it
        Request(5, 0, 0, cpus=2, time_limit_s=1000),  # fits now, but 1 is spare
    ]
    result = plan(queue, GPUS, [], cpu_slots=3, now=0.0, grace_s=5, room=room)
    assert placed(result) == [3, 4]
    delays = "waiting behind job 1, which starts first; this job could delay it"
    assert result.waiting[2] == result.waiting[5] == delays
    before = earliest_start(queue[0], GPUS, [], room=room)
    holds = [Hold(3, 2, 0, 1005.0), Hold(4, 1, 0, 25.0)]
    after = earliest_start(queue[0], GPUS, [], room=box(10, 1024, running, *holds))
    assert before.start == after.start == 100.0


def test_host_memory_is_reserved_for_the_head_as_cores_are():
    # 32 GiB, 20 held until t=100; the head asks 28: 4 spare then, 12 free now.
    running = Hold(9, 0, 20 * GIB, ends_at=100.0)
    queue = [
        Request(1, 0, 1, gpu_ids=(3,), host_memory_mb=28 * GIB),
        Request(2, 0, 1, host_memory_mb=6 * GIB, time_limit_s=1000),
        Request(3, 0, 1, host_memory_mb=4 * GIB, time_limit_s=1000),
        Request(4, 0, 1, host_memory_mb=2 * GIB, time_limit_s=50),
    ]
    result = plan(queue, FOUR, [], now=0.0, room=box(4, 32 * GIB, running))
    assert placed(result) == [3, 4]
    assert result.waiting[1] == "waiting for 28 GiB of host memory; 12 GiB free"
    assert result.waiting[2] == "waiting behind job 1, which starts first; this job could delay it"


def test_a_head_that_can_never_fit_holds_no_cores_back():
    queue = [Request(1, 0, 1, cpus=16), Request(2, 0, 1, cpus=2, time_limit_s=10)]
    result = plan(queue, GPUS, [], room=box(4))
    assert placed(result) == [2]


def test_without_the_boxs_room_cores_are_not_counted():
    assert placed(plan([Request(1, 0, 1, cpus=4096)], GPUS, [])) == [1]


FOUR = [GpuSlot(i, 8192) for i in range(4)]

asking = st.builds(
    Request,
    job_id=st.integers(1, 10_000),
    priority=st.integers(-1, 1),
    gpus=st.integers(0, 2),
    memory_mb=st.one_of(st.none(), st.integers(1000, 8000)),
    owner=st.sampled_from(["ana", "bo"]),
    time_limit_s=st.one_of(st.none(), st.floats(1, 1000)),
    cpus=st.one_of(st.none(), st.sampled_from([0.1, 0.5, 1.0, 2.0, 3.5, 8.0])),
    host_memory_mb=st.one_of(st.none(), st.integers(16, 40_000)),
)
holding = st.lists(
    st.builds(
        Hold,
        job_id=st.integers(20_000, 30_000),
        cpus=st.sampled_from([0.0, 0.5, 1.0, 4.0]),
        memory_mb=st.sampled_from([0, 1000, 16_000]),
        ends_at=st.one_of(st.none(), st.floats(1, 2000)),
    ),
    max_size=4,
)


@settings(max_examples=400, deadline=None)
@given(
    queue=st.lists(asking, max_size=12, unique_by=lambda r: r.job_id),
    held=holding,
    cpus=st.sampled_from([1.0, 4.0, 7.5, 16.0]),
    memory_mb=st.sampled_from([8_000, 32_000, 64_000]),
)
def test_no_plan_hands_out_more_cores_or_host_memory_than_free(queue, held, cpus, memory_mb):
    room = box(cpus, memory_mb, *held)
    free_cpus, free_mb = room.free()
    result = plan(queue, FOUR, [], cpu_slots=3, now=0.0, room=room)
    by_id = {r.job_id: r for r in queue}
    given_cpus = sum(by_id[p.job_id].cpus or 0 for p in result.placements)
    given_mb = sum(by_id[p.job_id].host_memory_mb or 0 for p in result.placements)
    assert given_cpus <= max(0.0, free_cpus) + SLACK
    assert given_mb <= max(0, free_mb)
    assert set(result.waiting) | set(placed(result)) == set(by_id)


@settings(max_examples=400, deadline=None)
@given(
    queue=st.lists(asking, max_size=10, unique_by=lambda r: r.job_id),
    held=holding,
    cpus=st.sampled_from([4.0, 8.0]),
)
def test_backfill_never_delays_the_head_for_cores_or_memory(queue, held, cpus):
    grace = 5.0
    result = plan(
        queue, FOUR, [], cpu_slots=3, now=0.0, grace_s=grace, room=box(cpus, 32_000, *held)
    )
    if result.head is None:
        return
    by_id = {r.job_id: r for r in queue}
    considered = [r.job_id for r in order(queue)]
    behind = set(considered[considered.index(result.head.job_id) :])

    def end(job_id: int) -> float | None:
        limit = by_id[job_id].time_limit_s
        return None if limit is None else limit + grace

    def start_with(placements) -> float:
        claims = [
            Claim(p.job_id, g, p.memory_mb, end(p.job_id))
            for p in placements
            for g in p.gpu_indices
        ]
        holds = [
            Hold(
                p.job_id,
                by_id[p.job_id].cpus or 0.0,
                by_id[p.job_id].host_memory_mb or 0,
                end(p.job_id),
            )
            for p in placements
        ]
        return earliest_start(
            result.head, FOUR, claims, room=box(cpus, 32_000, *held, *holds)
        ).start

    ahead = [p for p in result.placements if p.job_id not in behind]
    assert start_with(result.placements) <= start_with(ahead)
