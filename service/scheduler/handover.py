"""The steps that replace `place` when the executor has a queue of its own (Slurm).

`hand_over` gives the executor every queued job that gpuq's own rules let go (retry
back-off, `not_before`, no drain of the whole box, dependencies handed over first, the
owner's `max_gpus_running`, a sweep's `max_parallel`: its members are ordinary Slurm jobs,
handed over as earlier ones end); the executor orders and places them. `follow` marks the ones
it started, brings holds, priorities and dependencies up to date, records the executor's
reason for the ones that wait, and takes back those gpuq ended while they waited.
"""

import logging
from collections import Counter
from dataclasses import dataclass, field

from sqlmodel import col, or_, select

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import ACTIVE, TERMINAL, JobStatus, Reason
from service.executors import LaunchError, QueueingExecutor
from service.gpus import maintenance
from service.jobs import writes
from service.public import DrainPublic
from service.scheduler import booked
from service.scheduler.readiness import failed_dependency, not_yet
from service.scheduler.running import Books, MemoryRecord, Running
from service.scheduler.snapshot import max_parallel
from service.scheduler.starting import device_plan, hand_to_executor, new_launch
from service.store.db import utcnow
from service.store.tables import Job
from service.team.audit import record
from service.team.users import SCHEDULER

log = logging.getLogger(__name__)


def _dependencies(books: Books, jobs: list[Job]) -> dict[int | None, Job]:
    needed = {d for job in jobs for d in job.depends_on}
    if not needed:
        return {}
    with books.db.read() as session:
        return {d.id: d for d in session.exec(select(Job).where(col(Job.id).in_(needed)))}


def _after(job: Job, dependencies: dict[int | None, Job]) -> tuple[str, ...] | None:
    """The executor ids of the dependencies that have not succeeded yet; None while one of
    them is not handed over (queued in gpuq, or between two attempts)."""
    after = []
    for dep_id in job.depends_on:
        dep = dependencies[dep_id]
        if dep.status == JobStatus.succeeded:
            continue
        if dep.executor_job_id is None or dep.executor != "slurm":
            return None
        after.append(dep.executor_job_id)
    return tuple(after)


def _doom(books: Books, executor: QueueingExecutor, job_id: int, why: str) -> None:
    with books.db.write() as session:
        writes.cancel_queued(session, job_id, Reason.dependency_failed, f"will never start: {why}")
        record(session, SCHEDULER.name, "cancel", f"job/{job_id}", why=why)
    executor.withdraw(job_id)
    books.running.pop(job_id, None)


@dataclass
class _Held:
    """What the owners and sweeps already have with the executor or running, which
    `max_gpus_running` and `max_parallel` count against."""

    gpus: Counter[str] = field(default_factory=Counter)  #: owner → GPUs
    members: Counter[int] = field(default_factory=Counter)  #: sweep → members
    parallel: dict[int, int] = field(default_factory=dict)  #: sweep → its max_parallel

    def over(self, job: Job, limit: int | None) -> str | None:
        """Why handing `job` over now would pass its owner's or its sweep's limit."""
        if limit is not None and self.gpus[job.owner] + job.gpu_count > limit:
            return (
                f"over quota: {job.owner} already has {self.gpus[job.owner]} GPU(s) with "
                f"Slurm and may have {limit} (max_gpus_running)"
            )
        most = self.parallel.get(job.sweep_id) if job.sweep_id is not None else None
        if job.sweep_id is not None and most is not None and self.members[job.sweep_id] >= most:
            return f"sweep {job.sweep_id} already has {most} member(s) with Slurm, its max_parallel"
        return None

    def add(self, job: Job) -> None:
        self.gpus[job.owner] += job.gpu_count
        if job.sweep_id is not None:
            self.members[job.sweep_id] += 1


def _unhanded(books: Books) -> tuple[list[Job], _Held, DrainPublic | None]:
    """The queued jobs not handed over yet, in priority order; what is held already; and
    the drain of the whole box, if any."""
    with books.db.read() as session:
        queued = list(
            session.exec(
                select(Job)
                .where(col(Job.status) == JobStatus.queued, col(Job.executor_job_id).is_(None))
                .order_by(col(Job.priority).desc(), col(Job.id))
            )
        )
        if not queued:
            return [], _Held(), None
        holding = session.exec(
            select(Job.owner, Job.gpu_count, Job.sweep_id).where(
                or_(
                    col(Job.status).in_(ACTIVE),
                    (col(Job.status) == JobStatus.queued) & col(Job.executor_job_id).isnot(None),
                )
            )
        ).all()
        box = next((d for d in maintenance.drains(session) if d.gpu is None), None)
        sweeps = {job.sweep_id for job in queued if job.sweep_id is not None}
        held = _Held(parallel=max_parallel(session.connection(), sweeps) if sweeps else {})
    for owner, count, sweep_id in holding:
        held.gpus[owner] += count
        if sweep_id is not None:
            held.members[sweep_id] += 1
    return queued, held, box


def hand_over(books: Books, executor: QueueingExecutor) -> None:
    """Hands the executor every queued job that gpuq's own rules let go."""
    queued, held, box = _unhanded(books)
    if not queued:
        return
    dependencies = _dependencies(books, queued)
    limit = books.settings.max_gpus_running
    now = utcnow()
    # Jobs Slurm already has go on waiting there; a drained box hands over nothing new.
    drained = maintenance.box_reason(box, now) if box else None
    reasons: dict[int, str] = {}
    for job in queued:
        assert job.id is not None
        doom = failed_dependency(job, dependencies)
        if doom is not None:
            _doom(books, executor, job.id, doom)
            continue
        if job.retry_at is not None and job.retry_at > now:
            continue  # its wait reason says when it retries
        why = not_yet(job.not_before, now) or drained
        if why is not None:
            reasons[job.id] = why
            continue
        after = _after(job, dependencies)
        if after is None:
            reasons[job.id] = "waiting for the jobs it depends on to be handed to Slurm"
        elif (over := held.over(job, limit)) is not None:
            reasons[job.id] = over
        elif _hand(books, executor, job, after):
            held.add(job)
    _record_waits(books, {i: (why, None) for i, why in reasons.items()}, queued)


def _hand(books: Books, executor: QueueingExecutor, job: Job, after: tuple[str, ...]) -> bool:
    assert job.id is not None
    spec = JobSpec.model_validate(job.spec)
    attempt = job.attempt + 1
    devices = device_plan(
        spec,
        # each node's GPUs, numbered as the job will see them
        list(range(spec.resources.gpu_count)),
        simulated=books.gpus.inventory.simulated,
        headroom_mb=books.settings.gpu_headroom_mb,
        gpu_total_mb=0,
    )
    attempt_launch = new_launch(
        books,
        job.id,
        attempt,
        spec,
        devices,
        priority=job.priority,
        held=job.held,
        after=after,
        params=job.params,
        cpus=job.cpus,
        host_memory_mb=job.host_memory_mb,
        slurm_reservation=_slurm_reservation(books, spec.reservation),
    )
    try:
        # Outside any write transaction: sbatch may take seconds.
        started = hand_to_executor(books, executor, attempt_launch, job.owner, job.unix_user)
    except LaunchError as exc:
        log.error("job %d: %s", job.id, exc)
        with books.db.write() as session:
            writes.fail_launch(session, job.id, str(exc))
        return False
    with books.db.write() as session:
        handed = writes.record_handover(
            session, job.id, attempt, executor.name, started.executor_job_id
        )
    if not handed:  # cancelled meanwhile
        executor.withdraw(job.id)
        return False
    books.running[job.id] = Running(
        job.id, executor.run_dir(job.id, attempt), [], MemoryRecord(job.memory_mb)
    )
    return True


def _slurm_reservation(books: Books, name: str | None) -> str | None:
    """The Slurm reservation of the gpuq reservation `name`, if it is not over (a job that
    names one that is over runs as an ordinary job)."""
    if name is None:
        return None
    with books.db.read() as session:
        rows = booked.not_over(session.connection(), utcnow())
    return next((r.slurm_name for r in rows if r.name == name), None)


def follow(books: Books, executor: QueueingExecutor) -> None:
    """Marks the jobs the executor started, keeps the waiting ones up to date, and takes
    back the ones gpuq ended while they waited."""
    started = executor.started()
    if started:
        with books.db.write() as session:
            for job_id in started:
                if writes.mark_started(session, job_id):
                    log.info("job %d: started by %s", job_id, executor.name)
    waiting = executor.waiting()
    ids = [i for i in books.running if i not in started]
    if not ids:
        return
    with books.db.read() as session:
        jobs = list(session.exec(select(Job).where(col(Job.id).in_(ids))))
    dependencies = _dependencies(books, jobs)
    waits: dict[int, tuple[str, int | None]] = {}
    for job in jobs:
        assert job.id is not None
        if job.status in TERMINAL:  # cancelled while it waited
            executor.withdraw(job.id)
            books.running.pop(job.id, None)
            continue
        if job.status != JobStatus.queued or job.id not in waiting:
            continue
        doom = failed_dependency(job, dependencies)
        if doom is not None:
            _doom(books, executor, job.id, doom)
            continue
        after = _after(job, dependencies)
        executor.follow(job.id, held=job.held, priority=job.priority, after=after if after else ())
        waits[job.id] = (waiting[job.id].why, waiting[job.id].position)
    _record_waits(books, waits, jobs)


def _record_waits(books: Books, waits: dict[int, tuple[str, int | None]], jobs: list[Job]) -> None:
    """Writes the wait reasons and positions that changed."""
    current = {job.id: (job.wait_reason, job.queue_position) for job in jobs}
    changes = [
        {"job_id": job_id, "why": why, "position": position}
        for job_id, (why, position) in waits.items()
        if current.get(job_id) != (why, position)
    ]
    if changes:
        with books.db.write() as session:
            writes.set_wait_reasons(session, changes)
