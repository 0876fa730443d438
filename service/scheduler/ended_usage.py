"""Fair share's usage of the jobs that ended, kept from one plan to the next (`EndedUsage`).

Every plan weighs each owner's GPU time over the last `HORIZON_HALF_LIVES` half-lives
(`fairshare.decayed_usage`): five days of jobs at the default half-life, which a team's
sweeps can fill with tens of thousands of them. Read whole at every plan, 10,000 such jobs
made a plan take about 170 ms. A job that held `gpus` GPUs from `start` to `end` weighs,
at `now`,

    gpus * (exp(-r * (now - end)) - exp(-r * (now - start))) / r  =  exp(-r * (now - t0)) * w
    where w = gpus * (exp(r * (end - t0)) - exp(r * (start - t0))) / r

for any reference moment `t0`, and `w` does not change with `now`. So each ended job's `w`
is worked out once and each owner's sum of them kept, and a plan reads only the rows that
changed since the last one (revisions follow commit order, as `queued.QueueReader` relies
on). A job leaves its owner's sum once it ended longer ago than the horizon, as it left
the query that read them all; the reference moves, and everything is read again, every
`REBASE_HALF_LIVES`, before exp(r * (end - t0)) grows past what a float adds up exactly.
"""

import heapq
import math
from datetime import UTC, datetime
from functools import cache
from typing import Any

from sqlalchemy import Connection, Select, bindparam, select

from gpuq.contract.states import ACTIVE, TERMINAL
from service.jobs.reads import highest_revision
from service.jobs.writes import JOB

#: Jobs that ended this many half-lives ago or longer no longer count for fair share.
HORIZON_HALF_LIVES = 20
#: How often (in half-lives) the reference moment moves and every ended job is read again.
REBASE_HALF_LIVES = 10


class EndedUsage:
    """Each owner's decayed GPU-seconds of the GPU jobs that ended within the horizon."""

    def __init__(self, half_life_s: float) -> None:
        self._rate = math.log(2) / half_life_s
        self._horizon_s = HORIZON_HALF_LIVES * half_life_s
        self._rebase_s = REBASE_HALF_LIVES * half_life_s
        self._t0: float | None = None  #: the reference moment; None: read everything
        self._seen = 0  #: the highest revision read
        self._jobs: dict[int, tuple[str, float, float]] = {}  #: job → (owner, end, w)
        self._ends: list[tuple[float, int]] = []  #: (end, job), soonest to expire first
        self._sums: dict[str, float] = {}  #: owner → the sum of their jobs' w
        self._counts: dict[str, int] = {}  #: owner → how many jobs it sums

    def read(self, connection: Connection, now: float) -> dict[str, float]:
        """Each owner's usage of ended jobs at `now` (seconds since the epoch), in one read
        transaction's view; an owner with none is absent."""
        if self._t0 is None or now - self._t0 >= self._rebase_s:
            self._read_all(connection, now)
        else:
            seen = highest_revision(connection)
            for row in connection.execute(_ended_after(), {"seen": self._seen}):
                self._add(*row, now=now)
            self._seen = seen
        self._expire(now - self._horizon_s)
        assert self._t0 is not None
        scale = math.exp(-self._rate * (now - self._t0))
        return {owner: total * scale for owner, total in self._sums.items()}

    def _read_all(self, connection: Connection, now: float) -> None:
        self._t0, self._seen = now, highest_revision(connection)
        self._jobs, self._ends, self._sums, self._counts = {}, [], {}, {}
        since = datetime.fromtimestamp(now - self._horizon_s, UTC)
        for row in connection.execute(_ended_since(), {"since": since}):
            self._add(*row, now=now)

    def _add(
        self, job_id: int, owner: str, gpus: int, started: datetime, ended: datetime, *, now: float
    ) -> None:
        """Counts the job (again: a row read twice replaces what it counted)."""
        self._remove(job_id)
        assert self._t0 is not None
        start, end = started.timestamp(), min(ended.timestamp(), now)
        if end <= start:
            return  # it never held its GPUs: as `decayed_usage`, not counted at all
        rate, t0 = self._rate, self._t0
        weight = gpus * (math.exp(rate * (end - t0)) - math.exp(rate * (start - t0))) / rate
        self._jobs[job_id] = (owner, end, weight)
        heapq.heappush(self._ends, (end, job_id))
        self._sums[owner] = self._sums.get(owner, 0.0) + weight
        self._counts[owner] = self._counts.get(owner, 0) + 1

    def _remove(self, job_id: int) -> None:
        counted = self._jobs.pop(job_id, None)
        if counted is None:
            return
        owner, _, weight = counted
        self._counts[owner] -= 1
        if self._counts[owner]:
            self._sums[owner] -= weight
        else:  # exactly none, not what subtracting leaves of it
            del self._counts[owner], self._sums[owner]

    def _expire(self, cutoff: float) -> None:
        """Takes out the jobs that ended at `cutoff` or before."""
        ends = self._ends
        while ends and ends[0][0] <= cutoff:
            end, job_id = heapq.heappop(ends)
            counted = self._jobs.get(job_id)
            if counted is not None and counted[1] == end:  # not since read again
                self._remove(job_id)


def _columns() -> list[Any]:
    return [JOB.c.id, JOB.c.owner, JOB.c.gpu_count, JOB.c.started_at, JOB.c.finished_at]


@cache
def _ended_since() -> Select[Any]:
    """The GPU jobs that ended after `:since` (every plan ran this before `EndedUsage`)."""
    return select(*_columns()).where(
        JOB.c.finished_at > bindparam("since"),
        JOB.c.started_at.is_not(None),
        JOB.c.gpu_count > 0,
        JOB.c.status.not_in(ACTIVE),
    )


@cache
def _ended_after() -> Select[Any]:
    """The GPU jobs that ended, among the rows changed after revision `:seen`: through the
    index on (status, revision), which passes over the queued rows every plan rewrites."""
    return select(*_columns()).where(
        JOB.c.status.in_(TERMINAL),
        JOB.c.rev > bindparam("seen"),
        JOB.c.finished_at.is_not(None),
        JOB.c.started_at.is_not(None),
        JOB.c.gpu_count > 0,
    )
