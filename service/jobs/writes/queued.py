"""Writes to queued jobs: ending one that never started, and why each waits."""

from collections.abc import Sequence
from typing import Any

from sqlalchemy import bindparam, update
from sqlmodel import Session

from gpuq.contract.states import JobStatus, Reason
from service.jobs.reads import highest_revision
from service.jobs.writes.gate import JOB, transition


def cancel_queued(session: Session, job_id: int, reason: Reason, message: str) -> bool:
    """Ends a job that never started; False if it is no longer queued."""
    return transition(
        session,
        job_id,
        JobStatus.cancelled,
        reason=reason,
        message=message,
        wait_reason=None,
        queue_position=None,
    )


def set_wait_reasons(
    session: Session, changes: Sequence[dict[str, Any]], *, unchanged_since: int | None = None
) -> int:
    """Records why queued jobs wait and where they stand: `{"job_id", "why", "position"}`
    each, in one executemany (thousands of queued jobs, every scheduler step). With
    `unchanged_since` (the highest revision the plan read), only in rows no other writer
    changed since: a hold, a release or a new priority that came in while the plan was being
    made stays to be read, not hidden behind the plan's own write (`queued.QueueReader`).

    Each row takes its revision in the same UPDATE, the next ones above the highest there
    is (writers take turns: no other writer takes any meanwhile), where the trigger would
    give it one with an UPDATE of its own: a long queue's refresh of positions holds the
    write lock a third less. Returns the revision below them: theirs are the
    `len(changes)` above it (a job no longer queued leaves its own unused)."""
    connection = session.connection()
    base = highest_revision(connection)
    seen = _ANY_REVISION if unchanged_since is None else unchanged_since
    connection.execute(
        _WAIT_REASONS,
        [{**change, "rev": base + n, "seen": seen} for n, change in enumerate(changes, 1)],
    )
    return base


#: above every revision: no row is too new for the write
_ANY_REVISION = 2**31 - 1  # the column is a 32-bit INTEGER on PostgreSQL

_WAIT_REASONS = (
    update(JOB)
    .where(
        JOB.c.id == bindparam("job_id"),
        JOB.c.status == JobStatus.queued.value,
        JOB.c.rev <= bindparam("seen"),
    )
    .values(
        wait_reason=bindparam("why"), queue_position=bindparam("position"), rev=bindparam("rev")
    )
)
