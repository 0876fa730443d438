"""A sweep's leaderboard: each member's best and last value of the metric, ranked. Pure."""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from service.sweeps.stopping import History

#: a member's epoch metrics: epoch → {name: value}
Epochs = Mapping[int, Mapping[str, Any]]


@dataclass(frozen=True)
class Standing:
    job_id: int
    epochs: int  #: epochs it reported
    best: float | None  #: its best value of the metric (None: none was a number)
    last: float | None  #: the value at its latest epoch that reported the metric
    rank: int | None  #: 1 for the best member; None while it has no value to rank by


def history(epochs: Epochs, metric: str) -> dict[int, float | None]:
    """The metric by epoch, for the epochs that reported it (null: not a number)."""
    return {k: _finite_or_none(v.get(metric)) for k, v in sorted(epochs.items()) if metric in v}


def _finite_or_none(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _best(values: History, mode: str) -> float | None:
    numbers = [v for v in values.values() if v is not None]
    if not numbers:
        return None
    return min(numbers) if mode == "min" else max(numbers)


def standings(
    members: Sequence[int], epochs: Mapping[int, Epochs], metric: str | None, mode: str
) -> list[Standing]:
    """Every member, the best first; those with nothing to rank by after, in id order."""
    rows = []
    for job_id in members:
        own = epochs.get(job_id, {})
        values = history(own, metric) if metric else {}
        last = values[max(values)] if values else None
        rows.append((job_id, len(own), _best(values, mode), last))
    ranked = sorted(
        (r for r in rows if r[2] is not None),
        key=lambda r: (r[2] if mode == "min" else -r[2], r[0]),  # type: ignore[operator]
    )
    unranked = sorted((r for r in rows if r[2] is None), key=lambda r: r[0])
    return [
        Standing(job_id, count, best, last, rank if best is not None else None)
        for rank, (job_id, count, best, last) in enumerate([*ranked, *unranked], 1)
    ]


def reported(epochs: Mapping[int, Epochs], metric: str) -> bool:
    """Whether any member reported the metric in any epoch."""
    return any(metric in values for own in epochs.values() for values in own.values())
