"""The one gate for status, `transition`, and the statement every other write to a job row
goes through, `update_job`.

`transition` is the state machine: a conditional UPDATE whose WHERE clause lists the
allowed predecessors. Both write with Core statements in the caller's write session (no
autoflush: flush ORM changes first), built once per set of columns where they can be.
"""

from functools import lru_cache
from typing import Any

from sqlalchemy import ClauseElement, Row, Table, Update, bindparam, select, update
from sqlmodel import Session

from gpuq.contract.states import ALLOWED_FROM, TERMINAL, JobStatus
from service.store.db import utcnow
from service.store.tables import Allocation, Job
from service.usage import rollup

_STAMP = {JobStatus.starting: "started_at", JobStatus.running: "running_at"}
JOB: Table = Job.__table__  # type: ignore[attr-defined]
ALLOCATION: Table = Allocation.__table__  # type: ignore[attr-defined]
#: some of a job's columns, read with Core (`select(JOB.c.id, ...)`)
JobRow = Row[*tuple[Any, ...]]


def transition(session: Session, job_id: int, to: JobStatus, **values: Any) -> bool:
    """Moves a job to `to` if its current state allows it; False if another writer won.

    The WHERE clause is the state machine: a terminal state matches no predecessor set, so
    it never changes, and two racing writers cannot both succeed.
    """
    stamps = {_STAMP.get(to, "finished_at"): utcnow()} if to != JobStatus.queued else {}
    values = {"status": to, **(stamps | values)}  # a stamp in `values` is the caller's
    if _reusable(values):
        moved = _set_columns(session, job_id, to, values)
    else:
        moved = update_job(session, job_id, JOB.c.status.in_(ALLOWED_FROM[to]), **values)
    if moved and to in TERMINAL:
        _count_ended(session, job_id, to)
    return moved


def _count_ended(session: Session, job_id: int, to: JobStatus) -> None:
    """Counts the job that just ended in the usage rollup, in the same transaction."""
    job = session.connection().execute(_ENDED, {"job_id": job_id}).one()
    rollup.add_ended_job(
        session, job.owner, to.value, rollup.indices(job.assigned_gpus), job.finished_at
    )


_ENDED = select(JOB.c.owner, JOB.c.assigned_gpus, JOB.c.finished_at).where(
    JOB.c.id == bindparam("job_id")
)


def update_job(session: Session, job_id: int, *conditions: Any, **values: Any) -> bool:
    """Sets the job's `values` where `conditions` hold, never its status; False if no row
    matched."""
    if not conditions and _reusable(values):
        return _set_columns(session, job_id, None, values)
    statement = update(JOB).where(JOB.c.id == job_id, *conditions).values(**values)
    return session.connection().execute(statement).rowcount == 1


def _reusable(values: dict[str, Any]) -> bool:
    """Whether the statement built once for these columns (`_setting`) can set `values`:
    none of them is an SQL expression (`preemptions + 1`), which needs one of its own."""
    return not any(isinstance(value, ClauseElement) for value in values.values())


def _set_columns(
    session: Session, job_id: int, to: JobStatus | None, values: dict[str, Any]
) -> bool:
    """Sets the job's `values` (moving it to `to`, if given, from the states that allow
    it) with the statement built once for those columns: every start, event and exit runs
    some, and building one costs about three times what running it does."""
    params = {"job_": job_id, **{f"new_{column}": v for column, v in values.items()}}
    return session.connection().execute(_setting(tuple(values), to), params).rowcount == 1


@lru_cache(maxsize=256)  # one per call site's columns, in practice a few dozen
def _setting(columns: tuple[str, ...], to: JobStatus | None) -> Update:
    """The UPDATE that sets `columns` of the job `:job_` (moving it to `to`, from the states
    that allow it, if given), each from `:new_<column>`."""
    where = [JOB.c.id == bindparam("job_")]
    if to is not None:
        where.append(JOB.c.status.in_(ALLOWED_FROM[to]))
    settings = {c: bindparam(f"new_{c}", type_=JOB.c[c].type) for c in columns}
    return update(JOB).where(*where).values(settings)
