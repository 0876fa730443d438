"""The queued jobs as planning reads them (`QueueReader`), and placement requests from them
and from specs."""

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache, cached_property
from typing import Any

from sqlalchemy import Connection, Select, bindparam, select, text
from sqlmodel import col

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus
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
        )

    @property
    def waits_until(self) -> list[datetime]:
        """The moments it waits for before it may start: its retry, its `not_before`."""
        return [m for m in (self.retry_at, self.not_before) if m is not None]

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
    """

    def __init__(self) -> None:
        self._known: dict[int, tuple[int, QueuedJob]] = {}  #: job → (revision, as read then)
        self._seen: int | None = None  #: the highest revision read; None: compare them all
        self._compared_at = 0.0

    def read(self, connection: Connection) -> dict[int, QueuedJob]:
        """The queued jobs, by id, in one read transaction's view."""
        if self._seen is None or time.monotonic() - self._compared_at >= RESYNC_S:
            return self._compare_all(connection)
        changed = connection.execute(_changed(), {"seen": self._seen}).all()
        if changed:
            self._seen = max(rev for _, rev, _ in changed)
        stale = []
        for job_id, _, status in changed:
            self._known.pop(job_id, None)
            if status == JobStatus.queued:
                stale.append(job_id)
        self._read_rows(connection, stale)
        return {job_id: job for job_id, (_, job) in self._known.items()}

    def _compare_all(self, connection: Connection) -> dict[int, QueuedJob]:
        """Every queued job's revision against what was read; rows read again where it
        changed."""
        self._compared_at = time.monotonic()
        self._seen = connection.execute(_HIGHEST).scalar() or 0
        revisions: list[tuple[int, int]] = [tuple(r) for r in connection.execute(_revisions())]
        known = self._known
        stale = [
            job_id for job_id, rev in revisions if job_id not in known or known[job_id][0] != rev
        ]
        for job_id in stale:  # read again below if still queued (never kept as it was)
            known.pop(job_id, None)
        self._read_rows(connection, stale)
        # A job no longer queued when its row was read (started, cancelled) is left out.
        queued = {job_id: known[job_id][1] for job_id, _ in revisions if job_id in known}
        for job_id in known.keys() - queued.keys():
            del known[job_id]
        return queued

    def _read_rows(self, connection: Connection, ids: list[int]) -> None:
        for chunk in _chunks(ids):
            for row in connection.execute(_rows(), {"ids": chunk}):
                self._known[row[0]] = (row[-1], QueuedJob.from_row(row))


#: How often the queue reader compares every queued job's revision rather than asking for
#: the revisions above the highest it read.
RESYNC_S = 10.0

_HIGHEST = text("SELECT MAX(rev) FROM job")


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


def _chunks(ids: list[int]) -> Iterator[list[int]]:
    for start in range(0, len(ids), CHUNK):
        yield ids[start : start + CHUNK]


def request_for_spec(job_id: int, spec: JobSpec, owner: str) -> Request:
    """The request a spec would make, e.g. for a dry run."""
    res = spec.resources
    return Request(
        job_id=job_id,
        priority=spec.priority,
        gpus=res.gpu_count,
        gpu_ids=tuple(res.gpu_ids) if res.gpu_ids else None,
        memory_mb=res.memory_mb if res.gpu_count else None,
        owner=owner,
        time_limit_s=spec.time_limit_s,
    )
