"""Queue waits: exact percentiles of the waits read one by one, and within 1 % of the exact
ones where whole days come counted in buckets."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.usage import waits
from service.usage.waits import Waits

SECONDS = st.floats(min_value=0, max_value=1e8, allow_nan=False)


def exact(values: list[float]) -> Waits:
    w = Waits()
    for v in values:
        w.add(v)
    return w


def test_percentiles_of_exact_waits_are_numpys():
    assert exact([]).percentile(50) is None
    assert exact([7.0]).percentile(95) == 7.0
    assert exact([4.0, 1.0, 3.0, 2.0]).percentile(50) == 2.5
    assert exact([1.0, 2.0]).percentile(100) == 2.0
    values = [0.0, 10.0, 20.0, 30.0, 100.0]
    assert exact(values).percentile(95) == pytest.approx(np.percentile(values, 95))


@given(SECONDS)
def test_a_bucket_spans_one_percent_of_its_lower_bound(seconds):
    k = waits.bucket(seconds)
    if seconds < waits.FLOOR_S:
        assert k == 0
    else:
        low = waits.FLOOR_S * waits.GAMMA ** (k - 1)
        assert low * (1 - 1e-9) <= seconds < low * waits.GAMMA * (1 + 1e-9)


def test_counts_and_sums_add_up_across_writes_and_bad_waits_count_as_zero():
    stored = waits.counted([5.0, 5.0, 600.0])
    stored = waits.counted([5.0, float("nan"), -3.0], into=stored)
    day = np.frombuffer(stored, dtype=waits.BUCKETS)
    assert [tuple(b) for b in day.tolist()] == [
        (0, 2, 0.0),
        (waits.bucket(5.0), 3, 15.0),
        (waits.bucket(600.0), 1, 600.0),
    ]


def test_a_day_of_equal_waits_reads_exactly():
    w = Waits()
    w.add_day(waits.counted([300.0, 300.0]))
    w.add(300.0)
    assert (len(w), w.percentile(50), w.percentile(95)) == (3, 300.0, 300.0)


@given(
    st.lists(SECONDS, max_size=40),
    st.lists(st.lists(SECONDS, max_size=40), max_size=5),
    st.sampled_from([0, 25, 50, 95, 100]),
)
def test_percentiles_over_exact_waits_and_counted_days_are_within_one_percent(loose, days, pct):
    w = exact(loose)
    for day in days:
        w.add_day(waits.counted(day))
    everything = loose + [v for day in days for v in day]
    assert len(w) == len(everything)
    if not everything:
        assert w.percentile(pct) is None
        return
    truth = float(np.percentile(everything, pct))
    # each value is moved by at most 1 % (or to 0 under a millisecond), so is the ranked one
    assert w.percentile(pct) == pytest.approx(truth, rel=0.01, abs=waits.FLOOR_S)


def test_a_bucket_of_more_waits_than_a_stored_count_holds_is_stored_as_several():
    stored = waits.counted([5.0] * 70_000, into=waits.counted([5.0] * 10))
    day = np.frombuffer(stored, dtype=waits.BUCKETS)
    assert day["count"].tolist() == [waits.MOST, 70_010 - waits.MOST]
    w = Waits()
    w.add_day(stored)
    assert len(w) == 70_010
    assert w.percentile(50) == pytest.approx(5.0, rel=1e-6)
