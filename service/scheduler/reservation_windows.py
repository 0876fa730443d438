"""What an open reservation's window does to the jobs around it (the `windows` step, on
this box):

- Jobs still on its GPUs that do not belong (their owner is not one of its users: they
  started before it was booked, or ran past their time limit) are preempted under the
  site's preemption rules (`GPUQ_PREEMPT`): SIGTERM, they save and are queued again, and
  the reservations keep them off its GPUs until it is over. Where preemption is off, or a
  job may not be preempted, the window waits for it, and its users' jobs say who holds
  which GPU.
- Once its users have had nothing queued, and nothing running on its GPUs, for
  `GPUQ_RESERVATION_IDLE_RELEASE_S`, it is released: its GPUs return to everyone.
"""

import logging
import signal
import time
from typing import Any

from sqlalchemy import select
from sqlmodel import Session

from gpuq.contract.states import JobStatus
from service.jobs.writes import JOB, record_preemption
from service.scheduler import booked, preempt
from service.scheduler.bookings import gpu_list
from service.scheduler.running import Books
from service.store.db import utcnow
from service.store.reservation_tables import Reservation
from service.team.audit import record
from service.team.users import SCHEDULER
from service.usage.efficiency import duration

log = logging.getLogger(__name__)

#: the step runs at most this often
EVERY_S = 1.0

#: who has something queued (distinct: a long queue is a few owners)
_WAITING = (
    select(JOB.c.owner).where(JOB.c.status == JobStatus.queued, JOB.c.held.is_(False)).distinct()
)


class Windows:
    def __init__(self, books: Books) -> None:
        self.books = books
        #: reservation id → when its users last had something queued or running in it
        self._used_at: dict[int, float] = {}
        self._checked_at = 0.0

    def step(self) -> None:
        now = time.time()
        if now - self._checked_at < EVERY_S:
            return
        self._checked_at = now
        books = self.books
        with books.db.read() as session:
            connection = session.connection()
            rows = booked.not_over(connection, utcnow())
            rows = [r for r in rows if r.starts_at.timestamp() <= now]
            waiting = {owner for (owner,) in connection.execute(_WAITING)} if rows else set()
        open_ids = {row.id for row in rows}
        self._used_at = {i: t for i, t in self._used_at.items() if i in open_ids}
        for row in rows:
            users = frozenset(row.users) | booked.unix_group_members(row.group)
            gpus = set(row.gpu_indices)
            on_it = [job_id for job_id, r in books.running.items() if gpus & set(r.gpus)]
            jobs = preempt.running_jobs(books.db, on_it)
            outsiders = [j for j in jobs if j.owner not in users]
            if outsiders:
                self._make_way(row, outsiders, now)
            # Counted from when this process first saw it open, at the latest: a restart
            # forgets how long its users had left it idle, and never releases it early.
            if waiting & users or len(outsiders) < len(jobs) or row.id not in self._used_at:
                self._used_at[row.id] = now
            self._release_if_idle(row, now)

    def _make_way(self, row: Any, outsiders: list[Any], now: float) -> None:
        """Preempts the jobs on the reservation's GPUs that do not belong, where the rules
        allow."""
        books = self.books
        rule = preempt.rules(books.settings)
        if rule is None:
            return
        victims = preempt.candidates(outsiders, rule, now)
        if not victims:
            return
        why = (
            f"preempted for reservation {row.name}, whose window on "
            f"{gpu_list(row.gpu_indices)} opened"
        )
        stopped = []
        with books.db.write() as session:
            for victim in victims:
                if record_preemption(session, victim.job_id, by=None, detail=why):
                    _audit(session, victim.job_id, row, victim.lost_s)
                    stopped.append(victim)
        for victim in stopped:
            log.info("job %d: %s (%s)", victim.job_id, why, victim.describe())
            books.executor.signal(victim.job_id, signal.SIGTERM)

    def _release_if_idle(self, row: Any, now: float) -> None:
        """Releases the reservation if its users have left it idle too long."""
        idle_s = self.books.settings.reservation_idle_release_s
        if now - self._used_at[row.id] < idle_s:
            return
        why = f"released: its users had nothing queued or running in it for {duration(idle_s)}"
        with self.books.db.write() as session:
            reservation = session.get(Reservation, row.id)
            if reservation is None or reservation.released_at is not None:
                return
            moment = utcnow()
            reservation.released_at = reservation.updated_at = moment
            reservation.released_why = why
            session.add(reservation)
            record(session, SCHEDULER.name, "release", f"reservation/{row.id}", why=why)
        self._used_at.pop(row.id, None)
        log.info("reservation %s: %s", row.name, why)


def _audit(session: Session, job_id: int, row: Any, lost_s: float) -> None:
    record(
        session,
        SCHEDULER.name,
        "preempt",
        f"job/{job_id}",
        for_reservation=row.name,
        loses_s=round(lost_s, 1),
    )
