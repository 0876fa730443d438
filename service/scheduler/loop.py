"""The scheduler: reconcile once at start, then `ingest → reap → enforce → place` on every wake.

It wakes when a job is submitted or cancelled (`wake()`), when a runner exits (the
launcher says so, or a waiter thread for a runner it did not start), and every
`active_poll_s` while jobs run so progress keeps flowing. It never blocks on a child.
"""

import fcntl
import logging
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

from sqlalchemy import bindparam, delete, update
from sqlmodel import col, select

from service.audit import record
from service.db import Database, utcnow
from service.gpus.board import Board
from service.jobs import cancel_queued, transition
from service.models import Allocation, Job, Preview
from service.scheduler import snapshot
from service.scheduler.gpu_guard import GpuGuard, MemoryWatch, kill_reason
from service.scheduler.ingest import apply_events, read_events
from service.scheduler.launch import Launcher, devices_for, launch
from service.scheduler.outcome import classify
from service.scheduler.placement import Placement, order
from service.scheduler.requests import PREVIEW_ID, request_for_spec
from service.scheduler.retry import requeue, retry_delay
from service.scheduler.stats import SchedulerStats
from service.scheduler.watch import Watch, tail_log
from service.settings import Settings
from service.spec import JobSpec
from service.states import ACTIVE, JobStatus, Reason
from service.users import SCHEDULER
from worker.rundir import RunDir, read_json
from worker.runner import process_start_ticks
from worker.runspec import RunSpec

log = logging.getLogger(__name__)

#: Queue positions of jobs whose wait reason did not change are rewritten at most this
#: often: each start moves every queued job up one, and rewriting thousands of rows (and
#: waking everyone watching them) on every start would cost more than the start.
POSITIONS_EVERY_S = 2.0


class SchedulerLocked(RuntimeError):
    """Another scheduler already runs against this state directory."""


class Scheduler:
    def __init__(self, db: Database, settings: Settings, board: Board) -> None:
        self.db = db
        self.settings = settings
        self.board = board
        self.guard = GpuGuard(db, settings, board)
        self.watches: dict[int, Watch] = {}
        self.stats = SchedulerStats()
        self.launcher = Launcher(self.wake)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock: IO[bytes] | None = None
        self._positions_at = 0.0  #: when every queue position was last brought up to date

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Takes the scheduler lock, reconciles the jobs left active, starts the loop thread."""
        self._take_lock()
        self.reconcile()
        self.launcher.start()
        self._thread = threading.Thread(target=self._run, name="gpuq-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops scheduling; running jobs go on in their own sessions."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.launcher.stop()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def wake(self) -> None:
        self._wake.set()

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def job_groups(self) -> set[int]:
        return {w.pid for w in list(self.watches.values())}

    def _take_lock(self) -> None:
        path: Path = self.settings.home / "scheduler.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path, "wb")  # noqa: SIM115 (held open for the scheduler's lifetime)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise SchedulerLocked(
                f"another gpuq serve is already scheduling jobs from {self.settings.home}"
            ) from None
        self._lock = lock

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            began = time.monotonic()
            try:
                self.step()
            except Exception:
                log.exception("scheduler step failed; trying again")
            self.stats.step_seconds.observe(time.monotonic() - began)
            poll = self.settings.active_poll_s if self.watches else self.settings.idle_poll_s
            self._wake.wait(poll)

    # --- the steps ---------------------------------------------------------------------------

    def step(self) -> None:
        self.ingest()
        self.sample()
        self.reap()
        self.enforce()
        self.guard.drain()
        self.place()

    def reconcile(self) -> None:
        """Watches every job left starting/running; `reap` settles those whose runner is gone."""
        with self.db.read() as session:
            jobs = session.exec(select(Job).where(col(Job.status).in_(ACTIVE))).all()
        for job in jobs:
            assert job.id is not None
            run = RunDir.of(self.settings.runs_dir, job.id, job.attempt)
            info = read_json(run.runner) or {}
            watch = Watch(
                job_id=job.id,
                run=run,
                pid=int(info.get("runner_pid") or job.runner_pid or 0),
                gpus=list(job.assigned_gpus),
                memory=MemoryWatch(job.memory_mb, job.gpu_memory_peak_mb or 0),
                offset=job.events_offset,
                start_ticks=info.get("runner_start_ticks"),
            )
            self.watches[job.id] = watch
            state = "re-adopted its live runner" if watch.alive() else "its runner is gone"
            log.info("job %d: %s after a restart", job.id, state)

    def ingest(self) -> None:
        for watch in list(self.watches.values()):
            self._ingest(watch)

    def _ingest(self, watch: Watch) -> None:
        events, offset = read_events(watch.run.events, watch.offset)
        if offset == watch.offset:
            return
        with self.db.write() as session:
            job = session.get(Job, watch.job_id)
            if job is not None:
                apply_events(session, job, events, offset)
        watch.offset = offset

    def sample(self) -> None:
        """Records GPU memory peaks; kills a job over its cap under GPUQ_OVER_CAP=kill."""
        groups = {w.pid: w.job_id for w in self.watches.values() if w.gpus and w.pid > 0}
        memory = {w.job_id: w.memory for w in self.watches.values() if w.gpus}
        for overrun in self.guard.sample(groups, memory):
            watch = self.watches[overrun.job_id]
            with self.db.write() as session:
                session.execute(
                    update(Job)
                    .where(col(Job.id) == overrun.job_id, col(Job.stop_sent_at).is_(None))
                    .values(**kill_reason(overrun.detail))
                )
            # No grace: memory over the cap is memory another job was promised.
            watch.signal(signal.SIGKILL)
            watch.killed = True

    def reap(self) -> None:
        """Judges every job whose runner has exited, and frees its GPUs."""
        for watch in list(self.watches.values()):
            if watch.alive():
                continue
            self._ingest(watch)
            self._finish(watch)
            del self.watches[watch.job_id]

    def _finish(self, watch: Watch) -> None:
        exit_info = read_json(watch.run.exit)
        with self.db.write() as session:
            job = session.get(Job, watch.job_id)
            if job is None:
                return
            claimed = (job.reason.value, job.message or "") if job.reason else None
            tail = tail_log(watch.run.log)
            outcome = classify(
                exit_info=exit_info,
                worker_failure=claimed,
                stop_reason=job.stop_reason,
                time_limit_s=job.spec.get("time_limit_s"),
                builtin=job.spec.get("kind") == "keras",
                log_tail=tail,
            )
            if outcome.status == JobStatus.succeeded:
                tail = []
            retry_in = retry_delay(outcome, job, self.settings)
            if retry_in is None:
                transition(
                    session,
                    watch.job_id,
                    outcome.status,
                    reason=outcome.reason,
                    message=outcome.message,
                    exit_code=outcome.exit_code,
                    log_tail=tail,
                )
            else:
                requeue(session, job, outcome, tail, retry_in)
            session.execute(delete(Allocation).where(col(Allocation.job_id) == watch.job_id))
        # Whatever the job left behind in its process group goes now.
        watch.signal(signal.SIGKILL)
        self.guard.hold(watch.job_id, watch.gpus, watch.memory)
        log.info(
            "job %d: %s (%s) %s",
            watch.job_id,
            outcome.status.value if retry_in is None else f"retrying in {retry_in:g} s",
            outcome.reason or "-",
            outcome.message,
        )

    def enforce(self) -> None:
        """Stops jobs that were cancelled or ran past their time limit: SIGTERM, then SIGKILL."""
        if not self.watches:
            return
        now = utcnow()
        with self.db.read() as session:
            jobs = session.exec(select(Job).where(col(Job.id).in_(list(self.watches)))).all()
        for job in jobs:
            assert job.id is not None
            watch = self.watches[job.id]
            if job.stop_sent_at is None:
                cause = None
                limit = job.spec.get("time_limit_s")
                if job.cancel_requested_at is not None:
                    cause = Reason.cancelled_by_user
                elif limit and job.started_at and (now - job.started_at).total_seconds() > limit:
                    cause = Reason.time_limit
                if cause is not None:
                    log.info("job %d: sending SIGTERM (%s)", job.id, cause.value)
                    with self.db.write() as session:
                        session.execute(
                            update(Job)
                            .where(col(Job.id) == job.id)
                            .values(stop_reason=cause, stop_sent_at=now)
                        )
                    watch.signal(signal.SIGTERM)
            elif (
                not watch.killed
                and (now - job.stop_sent_at).total_seconds() >= self.settings.cancel_grace_s
            ):
                log.info("job %d: grace period over, sending SIGKILL", job.id)
                watch.signal(signal.SIGKILL)
                watch.killed = True

    def _snapshot(self, *, skip_if_idle: bool = False) -> snapshot.Snapshot | None:
        return snapshot.take(
            self.db,
            self.board,
            self.settings,
            cpu_busy=sum(not w.gpus for w in list(self.watches.values())),
            job_groups=self.job_groups(),
            skip_if_idle=skip_if_idle,
        )

    def place(self) -> None:
        """Starts the queued jobs that may start now; records why and where the others wait."""
        snap = self._snapshot(skip_if_idle=True)
        if snap is None:
            return
        result = snap.inputs.plan()
        placed = {p.job_id for p in result.placements}
        reasons = {**snap.blocked, **result.waiting}
        waiting = [i for i in snap.positions if i not in placed and i not in snap.doomed]
        positions = {job_id: n for n, job_id in enumerate(waiting, 1)}
        refresh = time.monotonic() - self._positions_at >= POSITIONS_EVERY_S
        if refresh:
            self._positions_at = time.monotonic()
        with self.db.write() as session:
            for job_id, why in snap.doomed.items():
                cancel_queued(session, job_id, Reason.dependency_failed, f"will never start: {why}")
                record(session, SCHEDULER.name, "cancel", f"job/{job_id}", why=why)
            changed = [
                {"job_id": job_id, "why": reasons.get(job_id), "position": positions[job_id]}
                for job_id in waiting
                if snap.queued[job_id].wait_reason != reasons.get(job_id)
                or snap.queued[job_id].queue_position is None
                or (refresh and snap.queued[job_id].queue_position != positions[job_id])
            ]
            if changed:  # one executemany, not an ORM statement per row
                table = Job.__table__  # type: ignore[attr-defined]
                session.connection().execute(
                    update(table)
                    .where(table.c.id == bindparam("job_id"), table.c.status == "queued")
                    .values(wait_reason=bindparam("why"), queue_position=bindparam("position")),
                    changed,
                )
        for placement in result.placements:
            with self.db.read() as session:
                chosen = session.get(Job, placement.job_id)
            if chosen is not None:  # _start claims it only if it is still queued
                self._start(chosen, placement)

    def preview(self, spec: JobSpec, owner: str) -> Preview:
        """Where `spec` would start if `owner` submitted it now, or why it would wait."""
        snap = self._snapshot()
        assert snap is not None  # only an idle-skipping snapshot is ever None
        inputs = snap.inputs
        inputs.queue.append(request_for_spec(PREVIEW_ID, spec, owner))
        result = inputs.plan()
        ahead = [r.job_id for r in order(inputs.queue, inputs.usage)].index(PREVIEW_ID)
        placed = next((p for p in result.placements if p.job_id == PREVIEW_ID), None)
        return Preview(
            would_start=placed is not None,
            assigned_gpus=list(placed.gpu_indices) if placed else [],
            memory_mb=spec.resources.memory_mb if spec.resources.gpu_count else None,
            wait_reason=result.waiting.get(PREVIEW_ID),
            jobs_ahead=ahead,
        )

    def _start(self, job: Job, placement: Placement) -> None:
        assert job.id is not None
        attempt = job.attempt + 1
        indices = list(placement.gpu_indices)
        with self.db.write() as session:
            claimed = transition(
                session,
                job.id,
                JobStatus.starting,
                assigned_gpus=indices,
                attempt=attempt,
                wait_reason=None,
                queue_position=None,
                events_offset=0,
            )
            if not claimed:  # cancelled meanwhile
                return
            if attempt == 1:
                waited = (utcnow() - job.created_at).total_seconds()
                self.stats.queue_wait_seconds.observe(max(0.0, waited))
            for index in indices:
                session.add(
                    Allocation(job_id=job.id, gpu_index=index, memory_mb=placement.memory_mb)
                )
        spec = JobSpec.model_validate(job.spec)
        totals = {d.index: d.memory_total_mb for d in self.board.inventory.devices}
        devices = devices_for(
            spec,
            indices,
            simulated=self.board.inventory.simulated,
            headroom_mb=self.settings.gpu_headroom_mb,
            gpu_total_mb=min((totals[i] for i in indices), default=0),
        )
        run_dir = RunDir.of(self.settings.runs_dir, job.id, attempt)
        previous = RunDir.of(self.settings.runs_dir, job.id, job.attempt) if job.attempt else None
        runspec = RunSpec(job_id=job.id, attempt=attempt, spec=spec, devices=devices)
        try:
            started = launch(runspec, run_dir, resume_from=previous, launcher=self.launcher)
        except OSError as exc:
            log.error("job %d: could not start its runner: %s", job.id, exc)
            with self.db.write() as session:
                transition(
                    session,
                    job.id,
                    JobStatus.failed,
                    reason=Reason.launch_error,
                    message=f"could not start the worker: {exc}",
                )
                session.execute(delete(Allocation).where(col(Allocation.job_id) == job.id))
            return
        with self.db.write() as session:
            session.execute(update(Job).where(col(Job.id) == job.id).values(runner_pid=started.pid))
        self.watches[job.id] = Watch(
            job.id,
            run_dir,
            started.pid,
            indices,
            MemoryWatch(placement.memory_mb),
            proc=started.proc,
            start_ticks=process_start_ticks(started.pid),
        )
        if started.proc is not None:
            threading.Thread(target=self._await_exit, args=(started.proc,), daemon=True).start()
        log.info(
            "job %d: attempt %d started on GPUs %s (runner pid %d)",
            job.id,
            attempt,
            indices or "none (CPU)",
            started.pid,
        )

    def _await_exit(self, proc: subprocess.Popen[bytes]) -> None:
        proc.wait()
        self.wake()
