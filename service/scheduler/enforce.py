"""The `enforce` step: memory caps (`caps`), the idle rule (`idle`), then cancels and time
limits: SIGTERM once, SIGKILL when the grace period is over."""

import logging
import signal
from datetime import datetime

from sqlalchemy import bindparam, select

from gpuq.contract.states import Reason
from service.jobs import writes
from service.jobs.writes import JOB, JobRow
from service.scheduler.caps import CapGuard
from service.scheduler.idle import check_idle
from service.scheduler.isolation import apart
from service.scheduler.running import Books
from service.store.db import utcnow

log = logging.getLogger(__name__)


#: What stopping a running job needs of it (built once: every step runs it).
_STOPS = select(
    JOB.c.id,
    JOB.c.stop_sent_at,
    JOB.c.cancel_requested_at,
    JOB.c.started_at,
    JOB.c.spec["time_limit_s"].as_float().label("time_limit_s"),
).where(JOB.c.id.in_(bindparam("ids", expanding=True)))


def enforce(books: Books, caps: CapGuard) -> None:
    caps.check()
    check_idle(books)
    stop_overdue(books)


def stop_overdue(books: Books) -> None:
    """Stops jobs that were cancelled or ran past their time limit: SIGTERM, then SIGKILL."""
    if not books.running:
        return
    now = utcnow()
    with books.db.reader.connect() as connection:  # no ORM session: every step runs it
        jobs = connection.execute(_STOPS, {"ids": list(books.running)}).all()
    for job in jobs:
        with apart(job.id, "stop it"):
            _stop_if_overdue(books, job, now)


def _stop_if_overdue(books: Books, job: JobRow, now: datetime) -> None:
    """SIGTERM for one cancelled or overdue job, or SIGKILL once its grace is over."""
    running = books.running[job.id]
    if job.stop_sent_at is None:
        cause = None
        limit = job.time_limit_s
        if job.cancel_requested_at is not None:
            cause = Reason.cancelled_by_user
        elif limit and job.started_at and (now - job.started_at).total_seconds() > limit:
            cause = Reason.time_limit
        if cause is not None:
            log.info("job %d: sending SIGTERM (%s)", job.id, cause.value)
            with books.db.write() as session:
                writes.record_stop(session, job.id, cause)
            books.executor.signal(job.id, signal.SIGTERM)
    elif (
        not running.killed
        and (now - job.stop_sent_at).total_seconds() >= books.settings.cancel_grace_s
    ):
        log.info("job %d: grace period over, sending SIGKILL", job.id)
        books.executor.signal(job.id, signal.SIGKILL)
        running.killed = True
