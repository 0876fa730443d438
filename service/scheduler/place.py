"""The `place` step: plan the queue (`placement.plan` over a `snapshot`), claim what may
start now and record why and where every other queued job waits, all in one write
transaction, then launch what it claimed (`starting.batch`). Also the dry run."""

import time
from typing import Any

from sqlmodel import Session

from gpuq.contract.states import Reason
from service.host import host_size
from service.jobs import writes
from service.scheduler import preempt, snapshot
from service.scheduler.ended_usage import EndedUsage
from service.scheduler.queued import QueueReader
from service.scheduler.replan import Replan
from service.scheduler.running import Books
from service.scheduler.starting import batch
from service.scheduler.victim_choice import Candidate
from service.team.audit import record
from service.team.users import SCHEDULER

#: Queue positions of jobs whose wait reason did not change are rewritten at most this
#: often: each start moves every queued job up one, and rewriting thousands of rows (and
#: waking everyone watching them) on every start would cost more than the start.
POSITIONS_EVERY_S = 2.0


class Placer:
    def __init__(self, books: Books) -> None:
        self.books = books
        self._positions_at = 0.0  #: when every queue position was last brought up to date
        self._replan = Replan()
        half_life_s = books.settings.fair_share_half_life_s
        self._queue = QueueReader()  #: the plan's own
        self._ended = EndedUsage(half_life_s)  #: the same, for fair share's ended jobs
        #: the cores and host memory this box gives jobs: placed by, as its GPUs are
        self._box = host_size(books.settings)

    def _snapshot(self, within: Session) -> snapshot.Snapshot | None:
        """What planning needs, with what runs as this process knows it (it runs the jobs);
        None if nothing is queued."""
        books = self.books
        cpu_jobs = sum(not r.gpus for r in books.running.values())
        return snapshot.take(
            books.db,
            books.gpus,
            books.settings,
            cpu_busy=cpu_jobs,
            job_sessions=set(books.executor.job_sessions()),
            skip_if_idle=True,
            reader=self._queue,
            ended=self._ended,
            within=within,
            box=self._box,
        )

    def wanted_in_s(self) -> float | None:
        """Seconds until a plan is wanted whatever happens (positions a plan left behind);
        None if none is."""
        return self._replan.wanted_in_s()

    def place(self) -> None:
        """Starts the queued jobs that may start now; records why and where the others wait.
        Nothing, not even a snapshot, if nothing changed since the last plan (`replan`)."""
        running = frozenset(self.books.running)
        with self.books.db.read() as session:  # one read transaction for both
            seen = self._replan.due(session.connection(), running)
            if seen is None:
                return
            snap = self._snapshot(session)
        self._replan.planned(seen, running, [] if snap is None else snap.falls_due)
        if snap is None:
            return
        read_upto = self._queue.seen  # a job changed after this read keeps its change
        result = snap.inputs.plan()
        preemption = preempt.consider(self.books, snap.inputs, result.head)
        placed = {p.job_id for p in result.placements}
        reasons = {**snap.blocked, **result.waiting}
        if preemption is not None:
            reasons[preemption.head] = preemption.why
        refresh = time.monotonic() - self._positions_at >= POSITIONS_EVERY_S
        if refresh:
            self._positions_at = time.monotonic()
        changes, moved = _changes(snap, reasons, placed | snap.doomed.keys(), refresh=refresh)
        if moved:  # positions left as they were: brought up to date by the period's end
            self._replan.plan_by(self._positions_at + POSITIONS_EVERY_S)
        victims = preemption.victims if preemption is not None else ()
        head = preemption.head if preemption is not None else 0
        if not (snap.doomed or changes or result.placements or victims):
            return  # nothing to write: no transaction, no commit to wake watchers
        try:
            with batch(self.books) as starts:
                for job_id, why in snap.doomed.items():
                    message = f"will never start: {why}"
                    writes.cancel_queued(starts.session, job_id, Reason.dependency_failed, message)
                    record(starts.session, SCHEDULER.name, "cancel", f"job/{job_id}", why=why)
                stopped = [v for v in victims if _preempt(starts.session, v, head)]
                before = (
                    writes.set_wait_reasons(starts.session, changes, unchanged_since=read_upto)
                    if changes
                    else 0
                )
                starts.start(result.placements)
        except BaseException:
            self._replan.forget()
            raise
        if changes:  # committed: the next read takes them as written
            values = {c["job_id"]: (c["why"], c["position"]) for c in changes}
            self._queue.wrote(values, before, before + len(changes))
        preempt.stop_victims(self.books, head, stopped)


def _changes(
    snap: snapshot.Snapshot, reasons: dict[int, str], leaving: set[int], *, refresh: bool
) -> tuple[list[dict[str, Any]], bool]:
    """The wait reasons and positions to write: `{"job_id", "why", "position"}` for each
    queued job, not `leaving` the queue, whose reason changed or that has no position
    yet, and, on a `refresh`, each whose position moved; and whether a position that
    moved is left as it was (no `refresh`)."""
    changes = []
    moved = False
    queued = snap.queued
    position = 0
    for job_id in snap.positions:
        if job_id in leaving:
            continue
        position += 1
        job, why = queued[job_id], reasons.get(job_id)
        if job.wait_reason != why or job.queue_position is None:
            changes.append({"job_id": job_id, "why": why, "position": position})
        elif job.queue_position != position:
            if refresh:
                changes.append({"job_id": job_id, "why": why, "position": position})
            else:
                moved = True
    return changes, moved


def _preempt(session: Session, victim: Candidate, head: int) -> bool:
    """Records that `victim` is being stopped for job `head` (and audits it); False if it
    is being stopped already."""
    if not writes.record_preemption(session, victim.job_id, by=head):
        return False
    record(
        session,
        SCHEDULER.name,
        "preempt",
        f"job/{victim.job_id}",
        for_job=head,
        loses_s=round(victim.lost_s, 1),
    )
    return True
