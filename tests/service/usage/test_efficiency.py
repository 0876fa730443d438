"""A job's efficiency, as `seff` tells it: memory peak against the cap with the cap to ask
for, GPU utilisation, time against the limit; null pieces where a job has none."""

from datetime import UTC, datetime, timedelta

import pytest

from service.usage.efficiency import duration, efficiency, suggested_cap_mb

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def job(**fields) -> dict:
    """A job that ran 12 minutes on one GPU capped at 8 GiB, with a 1 h limit."""
    row = {
        "status": "succeeded",
        "started_at": NOW - timedelta(minutes=20),
        "finished_at": NOW - timedelta(minutes=8),
        "gpu_count": 1,
        "memory_mb": 8192,
        "gpu_memory_peak_mb": 2150,
        "gpu_util_avg_pct": 43.4,
        "spec": {"time_limit_s": 3600},
    }
    return row | fields


def test_a_job_well_under_its_cap_is_told_what_to_ask_for():
    seen = efficiency(job(), NOW)
    assert seen is not None
    assert seen.text == (
        "used 2.1 of 8 GiB requested: next time --mem 3G; GPU utilisation 43 %; "
        "ran 12 min of its 1 h limit"
    )
    assert (seen.gpu_memory_peak_mb, seen.gpu_memory_limit_mb) == (2150, 8192)
    assert seen.gpu_memory_used_pct == 26.2
    assert seen.suggested_memory_mb == 3072
    assert (seen.wall_s, seen.time_limit_s, seen.time_used_pct) == (720.0, 3600, 20.0)


def test_a_peak_near_the_cap_gets_no_suggestion_and_one_over_it_does():
    near = efficiency(job(gpu_memory_peak_mb=7000), NOW)
    assert near is not None and near.suggested_memory_mb is None
    assert near.text.startswith("used 6.8 of 8 GiB requested; GPU")
    over = efficiency(job(gpu_memory_peak_mb=9000), NOW)
    assert over is not None and over.suggested_memory_mb == 11264
    assert over.text.startswith("used 8.8 of 8 GiB requested: next time --mem 11G;")


def test_whole_gpus_are_measured_against_the_gpu_where_its_memory_is_known():
    whole = job(memory_mb=None, gpu_util_avg_pct=None, spec={})
    known = efficiency(whole | {"gpu_memory_total_mb": 16384}, NOW)
    assert known is not None
    assert known.text == (
        "used 2.1 GiB of a whole 16 GiB GPU: --mem 3G would let others share it; ran 12 min"
    )
    unknown = efficiency(whole, NOW)
    assert unknown is not None
    assert unknown.text == "GPU memory peak 2.1 GiB; ran 12 min"
    assert (unknown.gpu_memory_limit_mb, unknown.gpu_memory_used_pct) == (None, None)
    assert (unknown.time_limit_s, unknown.time_used_pct) == (None, None)


def test_a_cpu_job_has_no_gpu_pieces_and_unmeasured_memory_says_so():
    cpu = efficiency(job(gpu_count=0, memory_mb=None, gpu_memory_peak_mb=None), NOW)
    assert cpu is not None
    assert cpu.text == "ran 12 min of its 1 h limit"
    assert (cpu.gpu_memory_peak_mb, cpu.gpu_memory_limit_mb, cpu.gpu_util_avg_pct) == (
        None,
        None,
        None,
    )
    simulated = efficiency(job(gpu_memory_peak_mb=None, gpu_util_avg_pct=None), NOW)
    assert simulated is not None
    assert simulated.text == (
        "GPU memory not measured (8 GiB per GPU requested); ran 12 min of its 1 h limit"
    )
    whole = job(memory_mb=None, gpu_memory_peak_mb=None, gpu_util_avg_pct=None)
    seen = efficiency(whole | {"gpu_memory_total_mb": 16384}, NOW)
    assert seen is not None and seen.suggested_memory_mb is None
    assert seen.text == "GPU memory not measured (whole 16 GiB GPUs); ran 12 min of its 1 h limit"


def test_a_running_job_counts_to_now_and_one_not_started_has_none():
    running = efficiency(job(status="running", finished_at=None), NOW)
    assert running is not None
    assert running.wall_s == 1200.0 and running.text.endswith("running for 20 min of its 1 h limit")
    assert efficiency(job(status="queued", started_at=None, finished_at=None), NOW) is None
    # queued again for a retry: its last attempt's start is stale, and nothing runs now
    assert efficiency(job(status="queued", finished_at=None), NOW) is None
    cancelled_queued = job(status="cancelled", started_at=None, gpu_memory_peak_mb=None)
    assert efficiency(cancelled_queued, NOW) is None


@pytest.mark.parametrize(
    ("peak", "cap"), [(100, 256), (1500, 2048), (2150, 3072), (6000, 7680), (9000, 11264)]
)
def test_suggested_caps_leave_a_fifth_and_round_up(peak, cap):
    assert suggested_cap_mb(peak) == cap
    assert cap >= peak * 1.2


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (45, "45 s"),
        (90, "1 min 30 s"),
        (120, "2 min"),
        (720, "12 min"),
        (749, "12 min"),
        (3600, "1 h"),
        (5400, "1 h 30 min"),
        (183600, "2 d 3 h"),
    ],
)
def test_durations(seconds, text):
    assert duration(seconds) == text
