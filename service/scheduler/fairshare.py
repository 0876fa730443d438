"""Each owner's recent GPU usage: GPU-seconds, decayed with a half-life."""

import math
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Interval:
    owner: str
    gpus: int
    start: float  #: seconds, on the same clock as `now`
    end: float | None  #: None while the job still runs


def decayed_usage(
    intervals: Iterable[Interval], now: float, half_life_s: float
) -> dict[str, float]:
    """GPU-seconds per owner, each second weighted by 2^(-age / half_life_s).

    A GPU held for one half-life that ended just now counts half_life_s / ln 2 * 0.5.
    """
    rate = math.log(2) / half_life_s
    usage: dict[str, float] = {}
    for i in intervals:
        end = now if i.end is None else min(i.end, now)
        if end <= i.start or i.gpus <= 0:
            continue
        weight = (math.exp(-rate * (now - end)) - math.exp(-rate * (now - i.start))) / rate
        usage[i.owner] = usage.get(i.owner, 0.0) + i.gpus * weight
    return usage
