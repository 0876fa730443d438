"""Which running jobs a waiting job preempts: the cheapest set that lets it start, lowest
priority first, then the fewest GPU-seconds lost, then the fewest jobs."""

from service.scheduler.host_room import Hold, HostRoom
from service.scheduler.placement import Claim, GpuSlot, Request
from service.scheduler.victim_choice import MAX_CANDIDATES, Candidate, Rules, eligible, victims

FOUR = [GpuSlot(i, 8000) for i in range(4)]


def whole(*jobs: tuple[int, list[int]]) -> list[Claim]:
    """Claims on whole GPUs: (job id, its GPUs) each."""
    return [Claim(job_id, gpu, None) for job_id, gpus in jobs for gpu in gpus]


def candidate(
    job_id: int, *, priority: int = 0, gpus: int = 1, lost_s: float = 60.0, **holds: float
):
    return Candidate(job_id, f"user{job_id}", priority, gpus, lost_s, **holds)


def urgent(gpus: int = 1, priority: int = 5, memory_mb: int | None = None) -> Request:
    return Request(job_id=100, priority=priority, gpus=gpus, memory_mb=memory_mb)


def chosen(*args, **kwargs) -> list[int]:
    return [v.job_id for v in victims(*args, **kwargs)]


def test_on_a_full_box_the_job_that_loses_least_since_its_checkpoint_is_preempted():
    claims = whole((1, [0]), (2, [1]), (3, [2]), (4, [3]))
    running = [candidate(1, lost_s=90), candidate(2, lost_s=5), candidate(3, lost_s=40)]
    assert chosen(urgent(), FOUR, claims, [*running, candidate(4, lost_s=300)]) == [2]


def test_lower_priority_goes_first_even_when_it_loses_more():
    claims = whole((1, [0]), (2, [1]), (3, [2]), (4, [3]))
    running = [candidate(1, priority=-1, lost_s=500), candidate(2, lost_s=1)]
    assert chosen(urgent(), FOUR, claims, running) == [1]


def test_only_jobs_of_lower_priority_than_the_waiting_one_are_taken():
    claims = whole((1, [0, 1, 2, 3]))
    assert chosen(urgent(gpus=2, priority=0), FOUR, claims, [candidate(1, priority=0)]) == []
    assert chosen(urgent(gpus=2, priority=1), FOUR, claims, [candidate(1, priority=0)]) == [1]


def test_a_set_is_taken_only_if_it_frees_enough_and_no_more_jobs_than_needed():
    claims = whole((1, [0]), (2, [1]), (3, [2, 3]))
    running = [candidate(1, lost_s=10), candidate(2, lost_s=10), candidate(3, gpus=2, lost_s=8)]
    # Two GPUs: job 3 alone loses 16 GPU-seconds, jobs 1 and 2 together 20.
    assert chosen(urgent(gpus=2), FOUR, claims, running) == [3]
    # Three GPUs: job 3 and one of the others; the one with the lower id breaks the tie.
    assert chosen(urgent(gpus=3), FOUR, claims, running) == [1, 3]


def test_nothing_is_preempted_when_the_job_fits_or_cannot_fit_even_so():
    claims = whole((1, [0]), (2, [1]))
    assert chosen(urgent(), FOUR, claims, [candidate(1), candidate(2)]) == []  # GPUs 2, 3 free
    full = whole((1, [0]), (2, [1]), (3, [2]), (4, [3]))
    # Job 4 is not a candidate (not preemptible, or too young): 4 GPUs can never be had.
    assert chosen(urgent(gpus=4), FOUR, full, [candidate(i) for i in (1, 2, 3)]) == []


def test_jobs_that_share_a_gpu_are_preempted_for_the_memory_the_waiting_job_needs():
    one = [GpuSlot(0, 8000)]
    claims = [Claim(1, 0, 3000), Claim(2, 0, 3000), Claim(3, 0, 2000)]
    running = [candidate(1, lost_s=30), candidate(2, lost_s=10), candidate(3, lost_s=1)]
    # 4000 MiB: job 3's 2000 are not enough alone; job 2's 3000 with the 0 free are not
    # either, so two must go, and 2 + 3 lose least.
    assert chosen(urgent(memory_mb=4000), one, claims, running) == [2, 3]
    assert chosen(urgent(memory_mb=2000), one, claims, running) == [3]


def test_a_cpu_job_preempts_nothing():
    assert chosen(urgent(gpus=0), FOUR, whole((1, [0, 1, 2, 3])), [candidate(1, gpus=4)]) == []


def test_only_the_cheapest_candidates_are_weighed_on_a_big_box():
    box = [GpuSlot(i, 8000) for i in range(16)]
    claims = whole(*((i, [i]) for i in range(16)))
    running = [candidate(i, lost_s=100 + i) for i in range(16)]
    assert chosen(urgent(gpus=2), box, claims, running) == [0, 1]
    assert chosen(urgent(gpus=MAX_CANDIDATES + 1), box, claims, running) == []


def test_what_may_be_preempted_at_all():
    rules = Rules(min_run_s=300, max_times=2)

    def may(**kwargs) -> bool:
        job = {"preemptible": True, "ran_s": 600, "preemptions": 0, "stopping": False}
        return eligible(rules, **(job | kwargs))

    assert may()
    assert not may(preemptible=False)  # a command job that did not promise to resume
    assert not may(ran_s=299)  # GPUQ_PREEMPT_MIN_RUN_S: no thrashing
    assert may(preemptions=1)
    assert not may(preemptions=2)  # GPUQ_PREEMPT_MAX_TIMES: no starvation
    assert not may(stopping=True)  # already being stopped (a cancel, a time limit)


def test_the_victim_is_described_with_its_owner_priority_and_loss():
    assert candidate(7, priority=0, lost_s=39.6).describe() == (
        "job 7 (user7, priority 0, loses ~40 s)"
    )


def test_no_one_is_preempted_for_a_gpu_that_is_only_draining():
    # GPU 0 drains after a victim's end: the waiting job starts there in seconds.
    gpus = [GpuSlot(0, 8000, unavailable="draining after job 1", draining=True), GpuSlot(1, 8000)]
    assert chosen(urgent(), gpus, whole((2, [1])), [candidate(2)]) == []
    # A GPU drained by an admin for maintenance is not coming back: job 2 is preempted.
    gpus = [GpuSlot(0, 8000, unavailable="drained for maintenance"), GpuSlot(1, 8000)]
    assert chosen(urgent(), gpus, whole((2, [1])), [candidate(2)]) == [2]


def test_a_job_waiting_for_cores_preempts_jobs_that_give_back_enough_of_them():
    # GPUs 2 and 3 are free; 4 cores, all held: 3 by job 1, 1 by job 2.
    room = HostRoom(4, 64_000, (Hold(1, 3, 0), Hold(2, 1, 0)))
    claims = whole((1, [0]), (2, [1]))
    running = [candidate(1, lost_s=90, cpus=3), candidate(2, lost_s=5, cpus=1)]
    head = Request(100, 5, 1, cpus=2)
    # Job 2 loses less, but its one core is not enough.
    assert chosen(head, FOUR, claims, running, room=room) == [1]
    assert chosen(head, FOUR, claims, running) == []  # cores not counted: it starts as is


def test_no_job_is_preempted_where_its_gpus_would_do_but_not_its_host_memory():
    # Job 3 (not a candidate) holds most of the memory: preempting job 1 frees its GPUs
    # and 8 GB, not the 20 GB the waiting job asks.
    room = HostRoom(16, 32_000, (Hold(1, 0, 8_000), Hold(3, 0, 24_000)))
    claims = whole((1, [0, 1, 2, 3]))
    head = Request(100, 5, 1, host_memory_mb=20_000)
    assert chosen(head, FOUR, claims, [candidate(1, gpus=4, host_memory_mb=8_000)], room=room) == []
    assert chosen(head, FOUR, claims, [candidate(1, gpus=4)]) == [1]


def test_nothing_is_preempted_when_the_gpus_and_the_cores_are_free_already():
    room = HostRoom(4, 64_000, (Hold(1, 2, 0),))
    head = Request(100, 5, 1, cpus=2)
    assert chosen(head, FOUR, whole((1, [0])), [candidate(1, cpus=2)], room=room) == []
