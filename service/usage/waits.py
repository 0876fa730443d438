"""Queue waits as a report collects them: exact values for the attempts it reads one by one,
and, for the whole days the rollup holds, counts and sums in buckets, so a median over a
year adds up a few hundred buckets a day instead of reading every attempt.

A bucket spans 1 % of its lower bound (the layout of a DDSketch) and stands for the mean of
the waits in it: a percentile over whole days is within 1 % of the exact one, and exact
where each bucket's waits are alike (one wait, or a fixed delay). A period read wholly from
attempts (none of its days whole) is exact.
"""

import math
from collections.abc import Iterable

import numpy as np

GAMMA = 1.01
#: Waits under this count in bucket 0 (a report shows milliseconds).
FLOOR_S = 0.001
LAST_BUCKET = 65535  #: over 10^280 s: a clamp that never bites
#: A day's buckets as stored: bucket numbers, ascending, each with its count and the sum of
#: its waits (to 7 digits: plenty for a mean). 8 bytes each: a year of days is read whole.
BUCKETS = np.dtype([("bucket", "<u2"), ("count", "<u2"), ("total", "<f4")])
#: The most waits one stored bucket counts; a bucket with more is stored as several.
MOST = 65535
_LOG_GAMMA = math.log(GAMMA)


def bucket(seconds: float) -> int:
    """The bucket of a wait: 0 under a millisecond, then k for
    [FLOOR * GAMMA^(k-1), FLOOR * GAMMA^k)."""
    if not seconds >= FLOOR_S:  # also NaN
        return 0
    return min(LAST_BUCKET, 1 + math.floor(math.log(seconds / FLOOR_S) / _LOG_GAMMA))


def counted(waits: Iterable[float], into: bytes = b"") -> bytes:
    """`into`'s buckets (stored bytes) with `waits` added, stored again; a wait that is not
    a number or under 0 counts as 0."""
    stored = np.frombuffer(into, dtype=BUCKETS)
    buckets: dict[int, tuple[int, float]] = {}
    for k, n, total in zip(stored["bucket"].tolist(), stored["count"].tolist(),
                           stored["total"].tolist(), strict=True):  # fmt: skip
        had, sum_ = buckets.get(k, (0, 0.0))
        buckets[k] = (had + n, sum_ + total)
    for seconds in waits:
        seconds = seconds if seconds >= 0 else 0.0  # NaN too
        k = bucket(seconds)
        n, total = buckets.get(k, (0, 0.0))
        buckets[k] = (n + 1, total + seconds)
    rows = []
    for k, (n, total) in sorted(buckets.items()):
        while n > 0:  # a count over MOST as several, each with its share of the sum
            part = min(n, MOST)
            rows.append((k, part, total * part / n))
            n, total = n - part, total - total * part / n
    return np.array(rows, dtype=BUCKETS).tobytes()


class Waits:
    """The waits of one row of a report."""

    def __init__(self) -> None:
        self.exact: list[float] = []
        self._days: list[bytes] = []
        #: the days' buckets merged: values (the means) and counts; None until asked
        self._merged: tuple[np.ndarray, np.ndarray] | None = None

    def add(self, seconds: float) -> None:
        self.exact.append(seconds)

    def add_day(self, stored: bytes) -> None:
        """A day's buckets, as the rollup stores them."""
        if stored:
            self._days.append(stored)
            self._merged = None

    def _days_merged(self) -> tuple[np.ndarray, np.ndarray]:
        """The days' buckets merged into one: a few thousand at most however many days."""
        if self._merged is None:
            days = np.frombuffer(b"".join(self._days), dtype=BUCKETS)
            counts = np.bincount(days["bucket"], weights=days["count"])
            totals = np.bincount(days["bucket"], weights=days["total"])
            used = np.flatnonzero(counts)
            self._merged = totals[used] / counts[used], counts[used].astype(np.int64)
        return self._merged

    def __len__(self) -> int:
        return len(self.exact) + int(self._days_merged()[1].sum())

    def percentile(self, pct: float) -> float | None:
        """The `pct`th percentile, interpolated between the nearest two values (numpy's
        default); a bucket's waits as their mean. None for no waits."""
        if not self:
            return None
        means, counts = self._days_merged()
        values = np.concatenate([np.asarray(self.exact, np.float64), means])
        weights = np.concatenate([np.ones(len(self.exact), np.int64), counts])
        order = np.argsort(values, kind="stable")
        values, through = values[order], np.cumsum(weights[order])
        rank = (int(through[-1]) - 1) * pct / 100
        low, high = math.floor(rank), math.ceil(rank)
        # the value at (0-based) position i: the first one whose running count passes i
        at_low, at_high = values[np.searchsorted(through, [low, high], side="right")]
        return float(at_low + (at_high - at_low) * (rank - low))
