"""Which GPU a shared job goes to under each `GPUQ_PLACEMENT`, and the words that say why:
`balanced` spreads shared jobs over idle GPUs but keeps one whole for a queued job that
needs it; `pack` is best fit; `spread` the emptiest GPU."""

import pytest

from service.scheduler.placement import Claim, GpuSlot, Request, plan

TWO = [GpuSlot(0, 16384), GpuSlot(1, 16384)]
FOUR_GIB = 4096


def where(result) -> dict[int, tuple[int, ...]]:
    return {p.job_id: p.gpu_indices for p in result.placements}


def why(result) -> dict[int, str]:
    return {p.job_id: p.why for p in result.placements}


def shared(job_id: int, memory_mb: int = FOUR_GIB, **rest) -> Request:
    return Request(job_id, 0, 1, memory_mb=memory_mb, **rest)


def test_balanced_puts_two_shared_jobs_on_an_idle_box_on_different_gpus():
    result = plan([shared(1), shared(2)], TWO, [])
    assert where(result) == {1: (0,), 2: (1,)}
    assert why(result) == {1: "GPU 0: idle", 2: "GPU 1: idle"}


def test_pack_puts_them_on_one_gpu_and_says_what_it_kept():
    result = plan([shared(1), shared(2)], TWO, [], placement="pack")
    assert where(result) == {1: (0,), 2: (0,)}
    assert why(result)[2] == "GPU 0: beside job 1; packed (GPUQ_PLACEMENT=pack) to keep GPU 1 whole"


def test_a_shared_job_already_running_leaves_the_idle_gpu_to_the_next_one():
    result = plan([shared(2)], TWO, [Claim(1, 0, FOUR_GIB)])
    assert where(result) == {2: (1,)}


@pytest.mark.parametrize("policy", ["balanced", "pack"])
@pytest.mark.parametrize("small_first", [True, False])
def test_a_whole_gpu_job_still_gets_the_free_gpu(policy, small_first):
    small, whole = shared(6), Request(7, 0, 1)
    queue = [small, whole] if small_first else [whole, small]
    result = plan(queue, TWO, [Claim(5, 0, FOUR_GIB)], placement=policy)
    assert where(result) == {6: (0,), 7: (1,)}
    if policy == "balanced" and small_first:
        assert why(result)[6] == "GPU 0: beside job 5; packed to keep GPU 1 whole for job 7"
    assert why(result)[7] == "GPU 1: whole"


def test_spread_takes_the_idle_gpu_even_if_a_whole_gpu_job_then_waits():
    result = plan([shared(6), Request(7, 0, 1)], TWO, [Claim(5, 0, FOUR_GIB)], placement="spread")
    assert where(result) == {6: (1,)}
    assert result.waiting[7].startswith("waiting for 1 GPU whole")


def test_when_every_gpu_is_busy_balanced_goes_beside_the_fewest_jobs():
    # GPU 0: one job, 14,384 MiB free; GPU 1: two jobs, 6,384 MiB free.
    held = [Claim(1, 0, 2000), Claim(2, 1, 5000), Claim(3, 1, 5000)]
    result = plan([shared(9)], TWO, held)
    assert where(result) == {9: (0,)}
    assert why(result)[9] == "GPU 0: beside job 1; no GPU it fits is idle"
    assert where(plan([shared(9)], TWO, held, placement="pack")) == {9: (1,)}  # the fullest
    # Two jobs on each: the emptier (GPU 0, 12,384 MiB free), as spread; pack the fuller.
    held.append(Claim(4, 0, 2000))
    assert where(plan([shared(9)], TWO, held)) == {9: (0,)}
    assert where(plan([shared(9)], TWO, held, placement="spread")) == {9: (0,)}
    assert where(plan([shared(9)], TWO, held, placement="pack")) == {9: (1,)}


def test_an_idle_gpu_is_kept_for_a_job_whose_other_gpu_frees_within_the_hour():
    three = [GpuSlot(i, 16384) for i in range(3)]
    # GPU 2 idle; GPU 0 held whole until 600 s; GPU 1 shared. Job 20, after the shared job
    # 19, needs two GPUs whole.
    held = [Claim(1, 0, None, ends_at=600.0), Claim(2, 1, FOUR_GIB)]
    result = plan([shared(19), Request(20, 0, 2)], three, held, now=0.0)
    assert where(result) == {19: (1,)}
    assert why(result)[19] == "GPU 1: beside job 2; packed to keep GPU 2 whole for job 20"


def test_no_idle_gpu_is_kept_for_a_job_that_could_not_start_for_hours():
    three = [GpuSlot(i, 16384) for i in range(3)]
    held = [Claim(1, 0, None, ends_at=6 * 3600.0), Claim(2, 1, FOUR_GIB)]
    result = plan([shared(19), Request(20, 0, 2)], three, held, now=0.0)
    assert where(result) == {19: (2,)}
    assert why(result)[19] == "GPU 2: idle"


def test_behind_the_head_a_shared_job_leaves_its_reserved_gpu_alone():
    three = [GpuSlot(i, 16384) for i in range(3)]
    # Job 20 (two whole GPUs) is the head: GPU 0 frees at 600 s, GPU 2 is idle now.
    held = [Claim(1, 0, None, ends_at=600.0), Claim(2, 1, FOUR_GIB)]
    queue = [Request(20, 5, 2), shared(21, time_limit_s=7200.0)]
    result = plan(queue, three, held, now=0.0)
    assert result.head is not None and result.head.job_id == 20
    assert where(result) == {21: (1,)}  # beside job 2, not on GPU 2, which the head is promised
    assert result.placements[0].backfill
    # One that ends before the head is due (600 s) takes the idle GPU meanwhile.
    quick = [Request(20, 5, 2), shared(21, time_limit_s=100.0)]
    result = plan(quick, three, held, now=0.0)
    assert (where(result), why(result)) == ({21: (2,)}, {21: "GPU 2: idle"})


def test_exclusive_jobs_and_named_gpus_go_where_they_did():
    for policy in ("balanced", "pack", "spread"):
        result = plan(
            [Request(1, 0, 1, gpu_ids=(1,), memory_mb=FOUR_GIB), Request(2, 0, 1)],
            TWO,
            [],
            placement=policy,
        )
        assert where(result) == {1: (1,), 2: (0,)}
        assert why(result) == {1: "GPU 1: asked for", 2: "GPU 0: whole"}
