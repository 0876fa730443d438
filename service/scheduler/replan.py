"""Whether the queue is worth planning again (`place`).

A plan comes out differently only when the queue changes (a submit, cancel, hold, priority,
a retry queued), the GPUs' states or the admins' drains change, the jobs running change (a
start, an exit: capacity, and dependencies that ended), or time passes (a retry or a
`not_before` falls due, a reservation's window opens or ends, fair-share usage decays,
another program's GPU memory comes and goes). The first two are read in one small query
(`fingerprint`), the jobs running are in memory, and time is covered by planning at least
every `REPLAN_EVERY_S` and at the next moment a queued job or a window falls due. Every
other step skips the snapshot and the plan.
"""

import time
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Connection, Select, Table, func, select

from gpuq.contract.states import JobStatus
from service.jobs.writes import JOB
from service.store.db import utcnow
from service.store.reservation_tables import Reservation
from service.store.tables import Gpu, Maintenance

#: planned again at least this often, for what changes with time alone
REPLAN_EVERY_S = 1.0

GPU: Table = Gpu.__table__  # type: ignore[attr-defined]
MAINTENANCE: Table = Maintenance.__table__  # type: ignore[attr-defined]
RESERVATION: Table = Reservation.__table__  # type: ignore[attr-defined]


@cache
def _query() -> Select[Any]:
    queued = JOB.c.status == JobStatus.queued
    return select(
        select(func.count()).select_from(JOB).where(queued).scalar_subquery(),
        # Every change to a job row gives it a new revision (a trigger), so any change to
        # a queued job, or a job newly queued, raises this.
        select(func.max(JOB.c.rev)).where(queued).scalar_subquery(),
        # Every change of a GPU's state stamps `state_since`.
        select(func.max(GPU.c.state_since)).scalar_subquery(),
        select(func.count()).select_from(MAINTENANCE).scalar_subquery(),
        select(func.max(MAINTENANCE.c.id)).scalar_subquery(),
        # Every change to a reservation stamps `updated_at`.
        select(func.max(RESERVATION.c.updated_at)).scalar_subquery(),
    )


def fingerprint(connection: Connection) -> tuple[Any, ...]:
    """What changes whenever the queue, a GPU's state, an admin's drain or a reservation
    does."""
    return tuple(connection.execute(_query()).one())


class Replan:
    """What the last plan saw, to tell whether the next one could differ."""

    def __init__(self) -> None:
        self._running: frozenset[int] | None = None
        self._seen: tuple[Any, ...] | None = None
        self._next_at = 0.0  #: monotonic: plan again by then whatever happens
        self._wanted_at: float | None = None  #: `plan_by`'s moment: the loop wakes for it

    def due(self, connection: Connection, running: frozenset[int]) -> tuple[Any, ...] | None:
        """The fingerprint to plan with, read in the plan's snapshot's transaction (or
        before it, so a change in between shows next time); None if nothing changed since
        the last plan."""
        seen = fingerprint(connection)
        if running == self._running and time.monotonic() < self._next_at and seen == self._seen:
            return None
        return seen

    def planned(
        self, seen: tuple[Any, ...], running: frozenset[int], falls_due: list[datetime]
    ) -> None:
        """A plan was made with `seen` and `running`; `falls_due`: when queued jobs that
        must wait for a moment (a retry, a `not_before`) may start."""
        self._seen, self._running = seen, running
        now, wall = time.monotonic(), utcnow()
        waits = [(moment - wall).total_seconds() for moment in falls_due if moment > wall]
        self._next_at = now + min([REPLAN_EVERY_S, *waits])
        self._wanted_at = None

    def plan_by(self, moment: float) -> None:
        """Plans again by `moment` (monotonic) at the latest, whatever happens: the loop,
        idle or not, wakes for it (`wanted_in_s`)."""
        self._next_at = min(self._next_at, moment)
        self._wanted_at = min(self._wanted_at or moment, moment)

    def wanted_in_s(self) -> float | None:
        """Seconds until the plan `plan_by` asked for (0 if overdue); None if none was."""
        if self._wanted_at is None:
            return None
        return max(0.0, self._wanted_at - time.monotonic())

    def forget(self) -> None:
        """The last plan's writes did not commit: the next step plans again."""
        self._seen = self._running = None
