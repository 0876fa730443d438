import math

import pytest

from service.scheduler.fairshare import Interval, decayed_usage


def test_one_half_life_ago_counts_half():
    hour = 3600.0
    recent = decayed_usage([Interval("a", 1, 0, 60)], now=60, half_life_s=hour)
    old = decayed_usage([Interval("a", 1, 0, 60)], now=60 + hour, half_life_s=hour)
    assert old["a"] == pytest.approx(recent["a"] / 2, rel=1e-9)
    assert recent["a"] == pytest.approx(60, rel=1e-2)


def test_gpus_multiply_and_running_jobs_count_up_to_now():
    usage = decayed_usage(
        [Interval("a", 4, 0, None), Interval("b", 1, 0, None)], now=100, half_life_s=1e9
    )
    assert usage["a"] == pytest.approx(400) and usage["b"] == pytest.approx(100)


def test_nothing_used_is_no_usage():
    assert decayed_usage([Interval("a", 0, 0, 10), Interval("b", 1, 5, 5)], 10, 60) == {}
    assert math.isfinite(decayed_usage([Interval("a", 1, 0, 10)], 10, 1e-3)["a"])
