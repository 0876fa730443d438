"""Starting placed jobs: claim each and its GPUs in the step's write transaction (`batch`),
each claim in a savepoint of its own so that one job's trouble never undoes another's
claim, then, once that has committed, work out each one's run directory and hand it to the
executor, outside the write lock (submissions wait for that lock).

Nothing runs that the database does not know: a job is launched only after its claim
(`starting`, its attempt, its GPUs) is committed. What the launch adds (the runner's pid,
the executor's id) is written with the scheduler's next write (`Books.unrecorded`, by
`finishing.settle`); until then, and after a crash, the runner is found by its run
directory. A crash between the claim's commit and the launch leaves a job `starting` with
no run directory: `Scheduler.reconcile` queues it again as it was, no attempt spent.
"""

import logging
import os
import signal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy import bindparam, select
from sqlmodel import Session

from gpuq.contract.device_plan import DevicePlan
from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus
from service.executors import Executor, Launch, LaunchError, Started
from service.jobs import writes
from service.jobs.writes import JOB, JobRow
from service.scheduler.isolation import each_apart
from service.scheduler.placement import Placement
from service.scheduler.running import Activity, Books, MemoryRecord, Running
from service.snapshots import path_of
from service.store.db import utcnow
from service.team import run_as

log = logging.getLogger(__name__)

#: Set (to anything) in gpuq's environment, it SIGKILLs itself after a step's claims have
#: committed and before their launch: the crash the recovery tests make on purpose.
CRASH_AFTER_CLAIM = "GPUQ_TEST_CRASH_AFTER_CLAIM"
#: the same, after the launch and before gpuq records the runner's pid
CRASH_AFTER_LAUNCH = "GPUQ_TEST_CRASH_AFTER_LAUNCH"
#: the process those hooks kill where it is not this one: gpuq serve, whose death ends the
#: scheduler's own process (`service.scheduler_process`)
crash_kills: int | None = None

#: no training step is taken for hung sooner (a big model's first epoch ends with a
#: validation pass that compiles its own function)
MIN_STEP_TIMEOUT_S = 120.0


def device_plan(
    spec: JobSpec, indices: list[int], *, simulated: bool, headroom_mb: int, gpu_total_mb: int
) -> DevicePlan:
    """The device plan a worker applies: mode, GPUs and TensorFlow's cap per logical GPU.

    `gpu_total_mb` is the smallest assigned GPU's memory (0 where unknown), which bounds a
    whole-GPU job that splits its GPUs into `replicas_per_gpu` logical ones, and turns the
    cap into the fraction of a GPU that JAX takes.
    """
    res = spec.resources
    if not indices:
        return DevicePlan.cpu()
    limit = None
    if not res.memory_growth:
        if res.memory_mb is not None:
            limit = res.memory_mb - headroom_mb
        elif res.replicas_per_gpu > 1 and gpu_total_mb > headroom_mb:
            limit = gpu_total_mb - headroom_mb
    if limit is not None:
        limit //= res.replicas_per_gpu
    return DevicePlan(
        mode="sim" if simulated else "gpu",
        indices=tuple(indices),
        memory_limit_mb=limit,
        memory_growth=res.memory_growth,
        replicas_per_gpu=res.replicas_per_gpu,
        memory_total_mb=gpu_total_mb or None,
    )


def new_launch(
    books: Books, job_id: int, attempt: int, spec: JobSpec, devices: DevicePlan, **queueing: Any
) -> Launch:
    """Attempt `attempt` of a job, resuming from the one before, with a builtin job's step
    timeout. `queueing`: the rest of `Launch`'s fields, from the job's row (its parameters,
    cores and host memory; what a queueing executor orders and holds it by)."""
    return Launch(
        job_id,
        attempt,
        spec,
        devices,
        resume_from=attempt - 1 or None,
        box_gpus=tuple(device.index for device in books.gpus.inventory.devices),
        near_cores=near_cores(books.gpus.inventory.near_cores, devices.indices),
        snapshot=path_of(books.settings, spec.command.snapshot)
        if spec.command is not None and spec.command.snapshot is not None
        else None,
        step_timeout_s=max(books.settings.idle_after_s, MIN_STEP_TIMEOUT_S),
        collective_timeout_s=(
            spec.resources.collective_timeout_s or books.settings.collective_timeout_s
            if spec.resources.nodes > 1
            else None
        ),
        **queueing,
    )


def near_cores(near: dict[int, tuple[int, ...]], gpus: tuple[int, ...]) -> tuple[int, ...]:
    """The cores nearest any of `gpus` (NVML's word for each); none where it said nothing
    of one of them."""
    if not gpus or any(gpu not in near for gpu in gpus):
        return ()
    return tuple(sorted({core for gpu in gpus for core in near[gpu]}))


def hand_to_executor(
    books: Books, executor: Executor, attempt: Launch, owner: str, unix_user: str | None
) -> Started:
    """Hands `owner`'s `attempt` to `executor`, as whom it runs as; `LaunchError` if it
    cannot start, or the run-as rules in force now refuse it (the job then fails,
    `launch_error`)."""
    settings = books.settings
    return executor.start(run_as.launch_as(settings, books.db, attempt, owner, unix_user))


#: What starting a placed job reads of it, if it is still queued (built once).
_CLAIMABLE = select(
    JOB.c.id,
    JOB.c.attempt,
    JOB.c.spec,
    JOB.c.owner,
    JOB.c.unix_user,
    JOB.c.created_at,
    JOB.c.params,
    JOB.c.cpus,
    JOB.c.host_memory_mb,
).where(JOB.c.id.in_(bindparam("ids", expanding=True)), JOB.c.status == JobStatus.queued)


@dataclass(frozen=True)
class _Claimed:
    """A job claimed in a transaction not yet committed: what to launch once it is."""

    launch: Launch
    owner: str
    unix_user: str | None
    running: Running
    waited_s: float | None  #: a first attempt's time in the queue


class StartBatch:
    """The placed jobs one write transaction claims (`batch`), to start once it commits."""

    def __init__(self, books: Books, session: Session, claimed: list[_Claimed]) -> None:
        self.books = books
        self.session = session  #: the transaction, for the step's other writes
        self._claimed = claimed
        inventory = books.gpus.inventory
        self._totals = {d.index: d.memory_total_mb for d in inventory.devices}

    def start(self, placements: Sequence[Placement]) -> None:
        """Claims each placed job that is still queued on its GPUs, to start it once the
        transaction has committed. Each claim is its own (`isolation.each_apart`): one that
        fails is undone alone, and the job stays queued for the next step."""
        if not placements:
            return
        ids = {"ids": [p.job_id for p in placements]}
        jobs = {row.id: row for row in self.session.connection().execute(_CLAIMABLE, ids)}
        placed = {p.job_id: (jobs[p.job_id], p) for p in placements if p.job_id in jobs}
        claims, _ = each_apart(self.session, placed, self._claim, "claim it to start")
        self._claimed.extend(claim for claim in claims.values() if claim is not None)

    def _claim(self, job_id: int, placed: tuple[JobRow, Placement]) -> _Claimed | None:
        """Claims one job for its next attempt; None if it is not to start (claimed
        meanwhile, or its stored spec is not one gpuq can run: it fails, `launch_error`)."""
        job, placement = placed
        books, session = self.books, self.session
        try:
            spec = JobSpec.model_validate(job.spec)
        except ValidationError as exc:
            log.error("job %d: its stored spec is not valid: %s", job_id, exc)
            writes.fail_launch(session, job_id, "its stored spec is not valid; submit it again")
            return None
        attempt = job.attempt + 1
        indices = list(placement.gpu_indices)
        total_mb = min((self._totals[i] for i in indices), default=0)
        claimed = writes.claim_for_start(
            session, job_id, attempt, indices, placement.memory_mb, placement.why, total_mb or None
        )
        if not claimed:
            return None
        devices = device_plan(
            spec,
            indices,
            simulated=books.gpus.inventory.simulated,
            headroom_mb=books.settings.gpu_headroom_mb,
            gpu_total_mb=total_mb,
        )
        running = Running(
            job_id,
            books.executor.run_dir(job_id, attempt),
            indices,
            MemoryRecord(placement.memory_mb),
            activity=Activity(
                exempt=spec.idle_exempt is not None, interactive=spec.kind == "session"
            ),
        )
        waited = (utcnow() - job.created_at).total_seconds() if attempt == 1 else None
        attempt_launch = new_launch(
            books,
            job_id,
            attempt,
            spec,
            devices,
            params=job.params,
            cpus=job.cpus,
            host_memory_mb=job.host_memory_mb,
        )
        return _Claimed(attempt_launch, job.owner, job.unix_user, running, waited)


@contextmanager
def batch(books: Books) -> Iterator[StartBatch]:
    """One write transaction for a step's writes and claims (`StartBatch.start`); once it has
    committed, the claimed jobs are launched. Rolled back, nothing was launched."""
    claimed: list[_Claimed] = []
    with books.db.write() as session:
        yield StartBatch(books, session, claimed)
    if claimed and os.environ.get(CRASH_AFTER_CLAIM):
        _crash()
    for job in claimed:
        _launch(books, job)
    if claimed and os.environ.get(CRASH_AFTER_LAUNCH):
        _crash()


def _crash() -> None:
    """The test hooks' crash: a moment `reconcile` must handle."""
    for pid in (crash_kills, os.getpid()):
        if pid is not None:
            os.kill(pid, signal.SIGKILL)


def _launch(books: Books, job: _Claimed) -> None:
    """StartBatch a claimed job, or fails it (`launch_error`) if it cannot be started: a job
    claimed and not launched would hold its GPUs until gpuq's next start."""
    job_id, attempt = job.launch.job_id, job.launch.attempt
    try:
        started = hand_to_executor(books, books.executor, job.launch, job.owner, job.unix_user)
    except Exception as exc:  # whatever it was, the job is claimed and must not stay so
        if not isinstance(exc, LaunchError):
            log.exception("job %d: its launch failed", job_id)
        log.error("job %d: %s", job_id, exc)
        with books.db.write() as session:
            writes.fail_launch(session, job_id, str(exc))
        return
    books.running[job_id] = job.running
    books.unrecorded[job_id] = started
    if job.waited_s is not None:
        books.stats.queue_wait_seconds.observe(max(0.0, job.waited_s))
    log.info(
        "job %d: attempt %d started on GPUs %s by the %s executor (runner pid %s)",
        job_id,
        attempt,
        job.running.gpus or "none (CPU)",
        books.executor.name,
        started.runner_pid,
    )


def record_launches(session: Session, executor: str, launched: dict[int, Started]) -> None:
    """Writes what launches added to their jobs (`Books.unrecorded`): the executor's id and
    the runner's pid."""
    for job_id, started in launched.items():
        writes.record_launch(session, job_id, executor, started.executor_job_id, started.runner_pid)
