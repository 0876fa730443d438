"""The `place` step: plan the queue (`placement.plan` over a `snapshot`), claim what may
start now and record why and where every other queued job waits, all in one write
transaction, then launch what it claimed (`starting.batch`). Also the dry run."""

import threading
import time
from typing import Any

from sqlmodel import Session

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import Reason
from service.jobs import writes
from service.public import Preview, VictimPublic
from service.scheduler import preempt, snapshot
from service.scheduler.ended_usage import EndedUsage
from service.scheduler.placement import order
from service.scheduler.preemption import Candidate
from service.scheduler.queued import PREVIEW_ID, QueueReader, request_for_spec
from service.scheduler.replan import Replan
from service.scheduler.running import Books
from service.scheduler.starting import batch
from service.store.db import utcnow
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
        #: The dry runs' (API threads, one at a time) keep theirs too: read afresh, 10,000
        #: queued jobs cost a dry run 230 ms, and 100,000 ended ones a second.
        self._preview_queue = QueueReader()
        self._preview_ended = EndedUsage(half_life_s)
        self._previewing = threading.Lock()

    def _snapshot(
        self,
        *,
        skip_if_idle: bool = False,
        reader: QueueReader | None = None,
        ended: EndedUsage | None = None,
        active: snapshot.Active | None = None,
        within: Session | None = None,
    ) -> snapshot.Snapshot | None:
        books = self.books
        if active is None:  # this process runs the jobs: it knows them
            running = list(books.running.values())
            cpu_jobs = sum(not r.gpus for r in running)
            active = snapshot.Active(len(running), cpu_jobs, set(books.executor.job_sessions()))
        return snapshot.take(
            books.db,
            books.gpus,
            books.settings,
            cpu_busy=active.cpu_jobs,
            job_sessions=active.sessions,
            skip_if_idle=skip_if_idle,
            reader=reader,
            ended=ended,
            within=within,
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
            snap = self._snapshot(
                skip_if_idle=True, reader=self._queue, ended=self._ended, within=session
            )
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

    def preview(self, spec: JobSpec, owner: str, active: snapshot.Active | None = None) -> Preview:
        """Where `spec` would start if `owner` submitted it now, or why it would wait.
        `active`: what runs, where another process runs the jobs (`snapshot.active`)."""
        with self._previewing:
            snap = self._snapshot(
                reader=self._preview_queue, ended=self._preview_ended, active=active
            )
        assert snap is not None  # only an idle-skipping snapshot is ever None
        inputs = snap.inputs
        inputs.queue.append(request_for_spec(PREVIEW_ID, spec, owner))
        ahead = [r.job_id for r in order(inputs.queue, inputs.usage)].index(PREVIEW_ID)
        placed = None
        why = snapshot.not_yet(spec.not_before, utcnow()) or snap.drained
        victims: tuple[Candidate, ...] = ()
        if why is None:
            result = inputs.plan()
            placed = next((p for p in result.placements if p.job_id == PREVIEW_ID), None)
            why = result.waiting.get(PREVIEW_ID)
            if result.head is not None and result.head.job_id == PREVIEW_ID:
                victims = preempt.preview(self.books, inputs, result.head)
        if victims:
            why = f"would preempt {preempt.listed(victims)} and start once "
            why += f"{preempt.they(victims)} stopped"
        return Preview(
            would_start=placed is not None,
            assigned_gpus=list(placed.gpu_indices) if placed else [],
            memory_mb=spec.resources.memory_mb if spec.resources.gpu_count else None,
            wait_reason=why,
            jobs_ahead=ahead,
            would_preempt=[
                VictimPublic(
                    job_id=v.job_id, owner=v.owner, priority=v.priority, loses_s=round(v.lost_s)
                )
                for v in victims
            ],
        )


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
