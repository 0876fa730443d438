"""What the jobs running on this box hold of its cores and host memory, read for a plan
(`host_room.HostRoom`), and when a running job stops at the latest."""

from functools import cache
from typing import Any

from sqlalchemy import Connection, Select, or_, select

from gpuq.contract.states import ACTIVE
from service.host import HostSize
from service.jobs.writes import JOB, JobRow
from service.scheduler.host_room import Hold, HostRoom


def read_room(connection: Connection, box: HostSize, grace_s: float) -> HostRoom:
    """The cores and host memory `box` gives jobs, and what each job that runs (or is
    starting) holds of them, until its time limit and `grace_s` at the latest."""
    holds = tuple(
        Hold(j.id, j.cpus or 0.0, j.host_memory_mb or 0, latest_end(j, grace_s))
        for j in connection.execute(_holding())
    )
    return HostRoom(box.cpus, box.memory_mb, holds)


def latest_end(job: JobRow, grace_s: float) -> float | None:
    """When a running job (a row with `started_at` and `time_limit_s`) stops at the
    latest: its time limit and the grace after it; None if it has no limit or has not
    started."""
    limit, started = job.time_limit_s, job.started_at
    return None if limit is None or started is None else started.timestamp() + limit + grace_s


@cache
def _holding() -> Select[Any]:
    """The jobs that run holding cores or host memory, CPU-only ones too. Built once:
    every scheduler step runs it."""
    holds = or_(JOB.c.cpus.is_not(None), JOB.c.host_memory_mb.is_not(None))
    return select(
        JOB.c.id,
        JOB.c.cpus,
        JOB.c.host_memory_mb,
        JOB.c.started_at,
        JOB.c.spec["time_limit_s"].as_float().label("time_limit_s"),
    ).where(JOB.c.status.in_(ACTIVE), holds)
