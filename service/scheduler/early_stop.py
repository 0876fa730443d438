"""The early-stopping step: a sweep's stopping rule (`service.sweeps.stopping`) judges its
running members on their metric histories, and the hopeless ones are stopped like a cancel
(SIGTERM, SIGKILL after the grace period; `enforce.stop_overdue` sees to the second), with
reason `early_stopped` and the rule's words. Their GPUs go to the next member as soon as
they exit.

A sweep is judged again only when one of its members reported a new epoch, so a step with
nothing new costs one small query."""

import logging
import signal

from sqlalchemy import Table, func, select

from gpuq.contract.states import ACTIVE, Reason
from gpuq.contract.sweep import SweepSpec
from service.jobs import writes
from service.jobs.writes import JOB
from service.scheduler.running import Books
from service.store.tables import JobMetric
from service.sweeps import reads
from service.sweeps.leaderboard import history
from service.sweeps.stopping import explain, hopeless

log = logging.getLogger(__name__)

METRIC: Table = JobMetric.__table__  # type: ignore[attr-defined]


class EarlyStopper:
    def __init__(self, books: Books) -> None:
        self.books = books
        self._seen: dict[int, int] = {}  #: sweep → its newest metric row when last judged
        #: `books.epochs_recorded` when last checked (None: never, so a restarted scheduler
        #: judges the epochs recorded before it)
        self._checked_at: int | None = None

    def check(self) -> None:
        """Stops the running members their sweeps' rules find hopeless: only once epochs
        were recorded since the last check (this scheduler alone records them)."""
        books = self.books
        if not books.running or self._checked_at == books.epochs_recorded:
            return
        self._checked_at = books.epochs_recorded
        # The members that may be judged (running, not being stopped already, with an epoch
        # reported), each with its newest epoch's row.
        query = (
            select(JOB.c.sweep_id, JOB.c.id, func.max(METRIC.c.id))
            .join(METRIC, METRIC.c.job_id == JOB.c.id)
            .where(
                JOB.c.id.in_(list(books.running)),
                JOB.c.sweep_id.is_not(None),
                JOB.c.status.in_(ACTIVE),
                JOB.c.stop_sent_at.is_(None),
                METRIC.c.step == 0,
            )
            .group_by(JOB.c.sweep_id, JOB.c.id)
        )
        with books.db.read() as session:
            rows = session.connection().execute(query).all()
        judged: dict[int, set[int]] = {}
        newest: dict[int, int] = {}
        for sweep_id, job_id, row in rows:
            judged.setdefault(sweep_id, set()).add(job_id)
            newest[sweep_id] = max(row, newest.get(sweep_id, row))
        for sweep_id, row in newest.items():
            if self._seen.get(sweep_id) == row:
                continue
            self._seen[sweep_id] = row
            try:
                self._judge(sweep_id, judged[sweep_id])
            except Exception:
                log.exception("sweep %d: could not judge its members; the rest go on", sweep_id)

    def _judge(self, sweep_id: int, running: set[int]) -> None:
        """Stops those of `running` (members of the sweep) its rule finds hopeless."""
        books = self.books
        sweep = reads.get_sweep(books.db, sweep_id)
        section = SweepSpec.model_validate(sweep.spec).sweep
        rule, metric = section.early_stopping, section.metric
        if rule is None or metric is None:
            return
        epochs = reads.member_epochs(books.db, sweep_id)
        histories = {job_id: history(own, metric) for job_id, own in epochs.items()}
        verdicts = hopeless(
            histories,
            running,
            mode=section.mode,
            grace_epochs=rule.grace_epochs,
            min_members=rule.min_members,
        )
        for verdict in verdicts:
            message = explain(verdict, metric)
            log.info("job %d: %s", verdict.job_id, message)
            with books.db.write() as session:
                writes.record_stop(session, verdict.job_id, Reason.early_stopped, message)
            books.executor.signal(verdict.job_id, signal.SIGTERM)
