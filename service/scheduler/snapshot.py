"""What the scheduler knows when it plans: the queue, who claims what until when, which
GPUs an admin drained, and why some queued jobs cannot be considered at all (held, waiting
on a retry, a dependency or their `not_before`, or the whole box drained)."""

import time
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Connection, Select, Table, func, select
from sqlmodel import Session, col

from gpuq.contract.states import ACTIVE, GpuState
from service.gpus import maintenance
from service.gpus.registry import GpuRegistry, StoredGpu, unavailable
from service.host import HostSize
from service.jobs.writes import JOB, JobRow
from service.public import DrainPublic
from service.scheduler import booked
from service.scheduler.ended_usage import EndedUsage
from service.scheduler.fairshare import Interval, decayed_usage
from service.scheduler.host_holds import latest_end, read_room
from service.scheduler.placement import Claim, GpuSlot, order
from service.scheduler.plan_inputs import PlanInputs
from service.scheduler.queued import QueuedJob, QueueReader
from service.scheduler.readiness import Dependency, failed_dependency, not_considered
from service.settings import Settings
from service.store.db import Database, utcnow
from service.store.tables import Job, Sweep

SWEEP: Table = Sweep.__table__  # type: ignore[attr-defined]


@dataclass
class Snapshot:
    queued: dict[int, QueuedJob]
    inputs: PlanInputs
    #: queued job → why it is not even considered (hold, retry back-off, dependency,
    #: not_before, the whole box drained)
    blocked: dict[int, str] = field(default_factory=dict)
    #: queued job → why it can never start (a dependency failed)
    doomed: dict[int, str] = field(default_factory=dict)
    #: every queued job id, in the order the queue is considered
    positions: list[int] = field(default_factory=list)
    #: why nothing starts at all: the whole box is drained for maintenance
    drained: str | None = None
    #: when queued jobs that wait for a moment (a retry, a `not_before`) may start
    falls_due: list[datetime] = field(default_factory=list)


def _seconds(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


@dataclass(frozen=True)
class Active:
    """What runs on this box, as planning counts it."""

    jobs: int
    cpu_jobs: int  #: jobs with no GPU, which take `GPUQ_MAX_CPU_JOBS` slots
    sessions: set[int]  #: the sessions their runners lead, to tell jobs' GPU memory apart


def active(db: Database) -> Active:
    """What runs, as the database has it: for a process that does not run the jobs itself
    (gpuq serve's API beside its scheduler's process, `--api-only`)."""
    with db.read() as session:
        query = select(col(Job.gpu_count), col(Job.runner_pid))
        rows = session.connection().execute(query.where(col(Job.status).in_(ACTIVE))).all()
    return Active(len(rows), sum(gpus == 0 for gpus, _ in rows), {pid for _, pid in rows if pid})


@dataclass
class _Read:
    """What `take` reads in its read transaction."""

    queued: dict[int, QueuedJob]
    others: list[QueuedJob]  #: the queued jobs that wait for more than room (not `plain`)
    used: dict[str, float]  #: owner → decayed GPU-seconds of the jobs that ended
    active: dict[int, JobRow]  #: the GPU jobs that run
    #: the jobs that `others` depend on
    dependencies: dict[int | None, Dependency]
    stored: list[StoredGpu]  #: the GPUs present
    allocations: list[JobRow]  #: `job_id`, `gpu_index`, `memory_mb`
    drains: dict[int | None, DrainPublic]  #: GPU (None: the whole box) → its drain
    sweep_limits: dict[int, int]
    sweep_running: dict[int, int]
    reservations: list[Any]  #: the `reservation` rows not over


def take(
    db: Database,
    gpus: GpuRegistry,
    settings: Settings,
    *,
    cpu_busy: int,
    job_sessions: set[int],
    skip_if_idle: bool = False,
    reader: QueueReader | None = None,
    ended: EndedUsage | None = None,
    within: Session | None = None,
    box: HostSize | None = None,
) -> Snapshot | None:
    """Reads what planning needs; None when `skip_if_idle` and nothing is queued, so an idle
    tick costs one indexed query rather than a scan of recent jobs and a GPU reading.
    `reader` and `ended`: the scheduler's own, which keep what they read from one step to
    the next (the queue; fair share's usage of the jobs that ended); `within`: a read
    transaction of the caller's to read in (else one of its own); `box`: the cores and
    host memory this box gives jobs, to place by (None: not counted, as under Slurm)."""
    now_dt = utcnow()
    now = time.time()
    with db.read() if within is None else nullcontext(within) as session:
        queued = (reader or QueueReader()).read(session.connection())
        if skip_if_idle and not queued:
            return None
        half_life_s = settings.fair_share_half_life_s
        read = _read_inputs(session, gpus, queued, ended or EndedUsage(half_life_s), now, now_dt)
        grace_s = settings.cancel_grace_s
        room = None if box is None else read_room(session.connection(), box, grace_s)
    usage = _usage(read, now, half_life_s)
    snapshot = Snapshot(
        queued=queued,
        inputs=PlanInputs(
            queue=[],
            gpus=_slots(read, gpus.foreign_mb(job_sessions)),
            allocations=_claims(read, settings.cancel_grace_s),
            cpu_slots=settings.max_cpu_jobs - cpu_busy,
            topology=gpus.inventory.topology,
            now=now,
            grace_s=settings.cancel_grace_s,
            usage=usage,
            running_gpus=_running_gpus(read),
            max_gpus_running=settings.max_gpus_running,
            sweep_limits=read.sweep_limits,
            sweep_running=read.sweep_running,
            room=room,
            placement=settings.placement,
            bookings=booked.bookings(read.reservations, now_dt),
        ),
        drained=maintenance.box_reason(read.drains[None], now_dt) if None in read.drains else None,
    )
    _sort_out(snapshot, read, now_dt)
    for row in read.reservations:  # planned again as a window opens and as it ends
        snapshot.falls_due += [row.starts_at, row.ends_at]
    return snapshot


def _read_inputs(
    session: Session,
    gpus: GpuRegistry,
    queued: dict[int, QueuedJob],
    ended: EndedUsage,
    now: float,
    now_dt: datetime,
) -> _Read:
    """Everything but the queue that planning reads, in the caller's read transaction."""
    connection = session.connection()
    used = ended.read(connection, now)
    active = {j.id: j for j in connection.execute(_active())}
    others = [j for j in queued.values() if not j.plain]
    needed = {d for j in others for d in j.depends_on}
    dependencies: dict[int | None, Dependency] = (
        {j.id: j for j in connection.execute(_dependency_states(needed))} if needed else {}
    )
    stored, allocations = gpus.load(session)
    drains = {d.gpu: d for d in maintenance.drains(session)}
    sweeps = {j.sweep_id for j in others if j.sweep_id is not None}
    sweep_limits, sweep_running = _sweeps(connection, sweeps) if sweeps else ({}, {})
    return _Read(
        queued,
        others,
        used,
        active,
        dependencies,
        stored,
        allocations,
        drains,
        sweep_limits,
        sweep_running,
        booked.not_over(connection, now_dt),
    )


def _slots(read: _Read, foreign: Mapping[int, int]) -> list[GpuSlot]:
    """The GPUs as planning weighs them: memory, what others hold, why one takes no job."""
    slots = []
    for g in read.stored:
        drained = maintenance.gpu_reason(read.drains.get(g.index))
        slots.append(
            GpuSlot(
                g.index,
                g.memory_total_mb,
                foreign.get(g.index, 0),
                unavailable(g) or drained,
                draining=g.state == GpuState.draining and drained is None,
            )
        )
    return slots


def _claims(read: _Read, grace_s: float) -> list[Claim]:
    """Who holds what, and until when at the latest (time limit plus grace)."""
    ends = {job_id: latest_end(j, grace_s) for job_id, j in read.active.items()}
    return [Claim(a.job_id, a.gpu_index, a.memory_mb, ends.get(a.job_id)) for a in read.allocations]


def _running_gpus(read: _Read) -> dict[str, int]:
    """owner → the GPUs their running jobs hold."""
    running: dict[str, int] = {}
    for j in read.active.values():
        running[j.owner] = running.get(j.owner, 0) + j.gpu_count
    return running


def _usage(read: _Read, now: float, half_life_s: float) -> dict[str, float]:
    """owner → decayed GPU-seconds: the running jobs' so far, and the ended ones'."""
    intervals = (
        Interval(j.owner, j.gpu_count, _seconds(j.started_at) or now, None)
        for j in read.active.values()
    )
    usage = decayed_usage(intervals, now, half_life_s)
    for owner, seconds in read.used.items():
        usage[owner] = usage.get(owner, 0.0) + seconds
    return usage


def _sort_out(snapshot: Snapshot, read: _Read, now_dt: datetime) -> None:
    """Sorts the queue into what planning considers, what is blocked and why, and what is
    doomed; and every queued job's position."""
    queued = snapshot.queued
    requests = [job.request for job in queued.values()]
    # Most queued jobs wait for nothing but room: only the others are asked more.
    considered = [job.request for job in queued.values() if job.plain]
    dependencies = read.dependencies
    for job in read.others:
        snapshot.falls_due += job.waits_until
        doom = failed_dependency(job, dependencies)
        why = None if doom else not_considered(job, dependencies, now_dt)
        if doom is not None:
            snapshot.doomed[job.id] = doom
        elif why is not None:
            snapshot.blocked[job.id] = why
        else:
            considered.append(job.request)
    if snapshot.drained is None:
        snapshot.inputs.queue = considered
    else:
        snapshot.blocked.update({r.job_id: snapshot.drained for r in considered})
    snapshot.positions = [r.job_id for r in order(requests, snapshot.inputs.usage)]


@cache
def _active() -> Select[Any]:
    """The GPU jobs that run: fair share and claims' ends (the jobs that ended are
    `EndedUsage`'s). Built once: every scheduler step runs it."""
    return select(
        JOB.c.id,
        JOB.c.owner,
        JOB.c.gpu_count,
        JOB.c.started_at,
        JOB.c.spec["time_limit_s"].as_float().label("time_limit_s"),
    ).where(JOB.c.status.in_(ACTIVE), JOB.c.started_at.is_not(None), JOB.c.gpu_count > 0)


def max_parallel(connection: Connection, ids: set[int]) -> dict[int, int]:
    """The `max_parallel` of each of these sweeps that has one."""
    limits = connection.execute(
        select(SWEEP.c.id, SWEEP.c.max_parallel).where(
            SWEEP.c.id.in_(ids), SWEEP.c.max_parallel.is_not(None)
        )
    )
    return {sweep_id: most for sweep_id, most in limits}


def _sweeps(connection: Connection, ids: set[int]) -> tuple[dict[int, int], dict[int, int]]:
    """The `max_parallel` of each of these sweeps that has one, and how many of its
    members run."""
    found = max_parallel(connection, ids)
    if not found:
        return {}, {}
    running = connection.execute(
        select(JOB.c.sweep_id, func.count())
        .where(JOB.c.sweep_id.in_(list(found)), JOB.c.status.in_(ACTIVE))
        .group_by(JOB.c.sweep_id)
    )
    return found, {sweep_id: count for sweep_id, count in running}


def _dependency_states(ids: set[int]) -> Select[Any]:
    return select(JOB.c.id, JOB.c.status, JOB.c.reason).where(JOB.c.id.in_(ids))
