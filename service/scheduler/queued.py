"""The queued jobs as planning reads them (`QueueReader`), and placement requests from them
and from specs."""

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache, cached_property
from typing import Any

from sqlalchemy import Connection, Select, bindparam, select
from sqlmodel import col

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus
from service.jobs.host_share import HostShare
from service.jobs.reads import highest_revision
from service.scheduler.placement import Request
from service.store.tables import Job

#: The id a dry run's job takes: after every real job, as a job submitted now would be.
PREVIEW_ID = 2**62


@dataclass(frozen=True)
class QueuedJob:
    """What planning reads of a queued job: a few columns, not the whole row, since every
    scheduler step reads every queued job."""

    id: int
    owner: str
    priority: int
    gpu_count: int
    memory_mb: int | None
    gpu_ids: tuple[int, ...] | None
    time_limit_s: float | None
    depends_on: list[int]
    held: bool
    retry_at: datetime | None
    not_before: datetime | None
    wait_reason: str | None
    queue_position: int | None
    sweep_id: int | None
    cpus: float | None = None  #: the cores it got at submit (None: none)
    host_memory_mb: int | None = None  #: the host memory it got at submit (None: none)
    reservation: str | None = None  #: the reservation it names (`spec.reservation`)

    @cached_property
    def request(self) -> Request:
        """Its placement request: made once per revision read (the reader keeps the job),
        not at every step of a long queue."""
        return Request(
            job_id=self.id,
            priority=self.priority,
            gpus=self.gpu_count,
            gpu_ids=self.gpu_ids,
            memory_mb=self.memory_mb,
            owner=self.owner,
            time_limit_s=self.time_limit_s,
            sweep_id=self.sweep_id,
            cpus=self.cpus,
            host_memory_mb=self.host_memory_mb,
            reservation=self.reservation,
        )

    @cached_property
    def waits_until(self) -> list[datetime]:
        """The moments it waits for before it may start: its retry, its `not_before`."""
        return [m for m in (self.retry_at, self.not_before) if m is not None]

    @cached_property
    def plain(self) -> bool:
        """Whether nothing but room decides when it may start: no hold, retry back-off,
        `not_before` or dependency, and in no sweep. Most queued jobs are, and a plan
        asks nothing more of them."""
        return not (
            self.held or self.retry_at or self.not_before or self.depends_on or self.sweep_id
        )

    def written(self, wait_reason: str | None, queue_position: int | None) -> "QueuedJob":
        """This job as the scheduler's own write of these left it (its request kept)."""
        # A copy that keeps what was worked out of it; `dataclasses.replace` would cost
        # about what reading the row again does.
        job = object.__new__(QueuedJob)
        job.__dict__.update(self.__dict__, wait_reason=wait_reason, queue_position=queue_position)
        return job

    @classmethod
    @cache
    def query(cls) -> Select[Any]:
        """The queued jobs, as rows `from_row` reads (the database picks the spec's fields),
        each with its revision last. Built once: every scheduler step runs it."""
        return select(
            col(Job.id),
            col(Job.owner),
            col(Job.priority),
            col(Job.gpu_count),
            col(Job.memory_mb),
            col(Job.spec)[("resources", "gpu_ids")].label("gpu_ids"),
            col(Job.spec)["time_limit_s"].as_float().label("time_limit_s"),
            col(Job.depends_on),
            col(Job.held),
            col(Job.retry_at),
            col(Job.not_before),
            col(Job.wait_reason),
            col(Job.queue_position),
            col(Job.sweep_id),
            col(Job.cpus),
            col(Job.host_memory_mb),
            col(Job.spec)["reservation"].as_string().label("reservation"),
            col(Job.rev),
        ).where(col(Job.status) == JobStatus.queued)

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> "QueuedJob":
        """The job in a row of `query` (its revision, last, left out)."""
        (id_, owner, priority, gpus, memory_mb, gpu_ids, time_limit_s, depends_on, held) = row[:9]
        return cls(
            id_,
            owner,
            priority,
            gpus,
            memory_mb,
            tuple(gpu_ids) if gpu_ids else None,
            time_limit_s,
            list(depends_on or []),
            bool(held),
            *row[9:-1],
        )


#: Ids in one `IN (...)` list: well under SQLite's limit on bound parameters.
CHUNK = 500


class QueueReader:
    """Reads the queued jobs for each plan, whole only where they changed.

    A trigger raises a job's revision on every change to its row, to one above every
    revision before it, and writers take turns, so revisions follow commit order: a step
    asks only for the jobs whose revision is above the highest it has read, through
    the revision's index, and reads again the rows of those still queued. A queue of
    thousands that barely moves costs one indexed query, not a scan. Every `RESYNC_S` it
    compares the whole queue's revisions instead, which also drops a row deleted outside
    gpuq (gpuq never deletes a job).

    The plan's own writes of wait reasons and positions (`wrote`) are not read back: the
    reader knows what they wrote, and which revisions were theirs. They go only to rows no
    one changed since this read (`seen`): a row another writer changed meanwhile keeps that
    writer's revision, and is read again.
    """

    def __init__(self) -> None:
        self._jobs: dict[int, QueuedJob] = {}  #: as read (or written) last
        self._revs: dict[int, int] = {}  #: job → its revision then
        self._seen: int | None = None  #: the highest revision read; None: compare them all
        self._compared_at = 0.0
        self._own: Written | None = None

    def read(self, connection: Connection) -> dict[int, QueuedJob]:
        """The queued jobs, by id, in one read transaction's view."""
        if self._seen is None or time.monotonic() - self._compared_at >= RESYNC_S:
            return self._compare_all(connection)
        changed = connection.execute(_changed(), {"seen": self._seen}).all()
        own, self._own = self._own, None
        if changed:
            self._seen = max(rev for _, rev, _ in changed)
        stale = []
        for job_id, rev, status in changed:
            values = None if own is None else own.of(job_id, rev)
            if values is not None and job_id in self._jobs:  # as the plan wrote it, no more
                self._jobs[job_id] = self._jobs[job_id].written(*values)
                self._revs[job_id] = rev
                continue
            self._forget(job_id)
            if status == JobStatus.queued:
                stale.append(job_id)
        self._read_rows(connection, stale)
        return dict(self._jobs)

    @property
    def seen(self) -> int | None:
        """The highest revision the last `read` saw: a row above it changed since."""
        return self._seen

    def wrote(self, values: dict[int, tuple[str | None, int]], after: int, upto: int) -> None:
        """The plan wrote these jobs' (wait reason, queue position), and every revision in
        (`after`, `upto`] is of that write (its transaction's alone): the next `read`
        takes them as written. Only once that write has committed."""
        self._own = Written(values, after, upto)

    def _compare_all(self, connection: Connection) -> dict[int, QueuedJob]:
        """Every queued job's revision against what was read; rows read again where it
        changed."""
        self._compared_at = time.monotonic()
        self._own = None
        self._seen = highest_revision(connection)
        revisions: list[tuple[int, int]] = [tuple(r) for r in connection.execute(_revisions())]
        revs = self._revs
        stale = [job_id for job_id, rev in revisions if revs.get(job_id) != rev]
        for job_id in stale:  # read again below if still queued (never kept as it was)
            self._forget(job_id)
        self._read_rows(connection, stale)
        # A job no longer queued when its row was read (started, cancelled) is left out.
        queued = {job_id for job_id, _ in revisions if job_id in revs}
        for job_id in revs.keys() - queued:
            self._forget(job_id)
        return dict(self._jobs)

    def _forget(self, job_id: int) -> None:
        self._jobs.pop(job_id, None)
        self._revs.pop(job_id, None)

    def _read_rows(self, connection: Connection, ids: list[int]) -> None:
        for chunk in _id_chunks(ids):
            for row in connection.execute(_rows(), {"ids": chunk}):
                self._jobs[row[0]] = QueuedJob.from_row(row)
                self._revs[row[0]] = row[-1]


@dataclass(frozen=True)
class Written:
    """A plan's write of wait reasons and positions: job → (reason, position), and the
    revisions it took."""

    values: dict[int, tuple[str | None, int]]
    after: int
    upto: int

    def of(self, job_id: int, rev: int) -> tuple[str | None, int] | None:
        """What it wrote of `job_id`, if `rev` (the row's latest) is of this write."""
        return self.values.get(job_id) if self.after < rev <= self.upto else None


#: How often the queue reader compares every queued job's revision rather than asking for
#: the revisions above the highest it read.
RESYNC_S = 10.0


@cache
def _revisions() -> Select[Any]:
    ids: Any = col(Job.id)  # never None in a stored row
    return select(ids, col(Job.rev)).where(col(Job.status) == JobStatus.queued)


@cache
def _rows() -> Select[Any]:
    """Queued jobs' rows (`QueuedJob.query`) among `:ids`."""
    return QueuedJob.query().where(col(Job.id).in_(bindparam("ids", expanding=True)))


@cache
def _changed() -> Select[Any]:
    ids: Any = col(Job.id)
    return select(ids, col(Job.rev), col(Job.status)).where(col(Job.rev) > bindparam("seen"))


def _id_chunks(ids: list[int]) -> Iterator[list[int]]:
    for start in range(0, len(ids), CHUNK):
        yield ids[start : start + CHUNK]


def request_for_spec(
    job_id: int, spec: JobSpec, owner: str, share: HostShare = HostShare()
) -> Request:
    """The request a spec would make, e.g. for a dry run; `share`: the cores and host
    memory it would get (its spec's, else the site's defaults)."""
    res = spec.resources
    return Request(
        job_id=job_id,
        priority=spec.priority,
        gpus=res.gpu_count,
        gpu_ids=tuple(res.gpu_ids) if res.gpu_ids else None,
        memory_mb=res.memory_mb if res.gpu_count else None,
        owner=owner,
        time_limit_s=spec.time_limit_s,
        cpus=share.cpus,
        host_memory_mb=share.host_memory_mb,
        reservation=spec.reservation,
    )
