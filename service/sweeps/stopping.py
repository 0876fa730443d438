"""The median stopping rule: which running members of a sweep are hopeless. Pure: a function
of the members' metric histories.

After epoch k ≥ `grace_epochs`, a running member whose best value so far is worse than the
median of the other members' values at epoch k is stopped, provided at least `min_members`
other members (running or ended, stopped ones included) reported epoch k. The member is
judged at its latest epoch that enough others reached. A value that is not a number (a
diverged loss reads as null) is the worst there is: a member whose metric never was a
number trails any median that is one.
"""

import math
import statistics
from collections.abc import Collection, Mapping
from dataclasses import dataclass

#: a member's metric by epoch; None where the epoch's value was not a number
History = Mapping[int, float | None]


@dataclass(frozen=True)
class HopelessMember:
    """The stopping rule's answer for one running member: stop it; and what it was judged
    on."""

    job_id: int
    epoch: int  #: the epoch it was judged at
    best: float | None  #: its best value so far (None: never a number)
    median: float  #: the other members' median at that epoch
    others: int  #: how many other members that median is of


def _worst(mode: str) -> float:
    return math.inf if mode == "min" else -math.inf


def _value(value: float | None, mode: str) -> float:
    return _worst(mode) if value is None or math.isnan(value) else value


def _worse(a: float, b: float, mode: str) -> bool:
    return a > b if mode == "min" else a < b


def hopeless(
    histories: Mapping[int, History],
    running: Collection[int],
    *,
    mode: str,
    grace_epochs: int,
    min_members: int,
) -> list[HopelessMember]:
    """The members of `running` to stop, each with what it was judged on."""
    found = []
    for job_id in sorted(running):
        own = histories.get(job_id) or {}
        reached = sorted((k for k in own if k >= grace_epochs), reverse=True)
        for epoch in reached:
            others = [
                _value(h[epoch], mode)
                for other, h in histories.items()
                if other != job_id and epoch in h
            ]
            if len(others) < min_members:
                continue
            median = statistics.median(others)
            values = [_value(v, mode) for v in own.values()]
            best = min(values) if mode == "min" else max(values)
            if math.isfinite(median) and _worse(best, median, mode):
                shown = best if math.isfinite(best) else None
                found.append(HopelessMember(job_id, epoch, shown, median, len(others)))
            break
    return found


def explain(member: HopelessMember, metric: str) -> str:
    """Why a member was stopped, and by how much it trailed."""
    head = f"stopped early at epoch {member.epoch} by its sweep's median rule"
    others = f"the median {member.median:.4g} of {member.others} other member(s) at that epoch"
    if member.best is None:
        return f"{head}: its {metric} was never a number, against {others}"
    by = abs(member.best - member.median)
    return f"{head}: its best {metric} {member.best:.4g} trailed {others} by {by:.4g}"
