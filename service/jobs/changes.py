"""Waiting for jobs to change: one job (long poll) or every job (the event stream).

Each change to a job gives it a new, higher `rev` (database triggers), so "what changed
since revision N" is one indexed query, whichever process made the change.
"""

import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from sqlmodel import col, select

from gpuq.contract.states import TERMINAL
from service import jobs
from service.jobs.reads import highest_revision
from service.store.db import Database
from service.store.tables import Job

BATCH = 500


def latest_revision(db: Database) -> int:
    with db.read() as session:
        return highest_revision(session.connection())


async def wait_for_change(
    db: Database, job_id: int, since: int | None, timeout_s: float
) -> Mapping[str, Any]:
    """The job once its revision passes `since` (default: as it is now), or after
    `timeout_s` as it is then. An ended job is returned at once: it will not change."""
    deadline = time.monotonic() + timeout_s
    job: Mapping[str, Any] | None = None
    while True:
        notice = db.notices.arm()
        try:
            # One indexed row, not worth a thread hop; read whole only when it changed: a
            # commit to any job wakes every long poll.
            if job is None or jobs.read_revision(db, job_id) != job["rev"]:
                job = jobs.read_job(db, job_id)
            if since is None:
                since = job["rev"]
            left = deadline - time.monotonic()
            if job["rev"] > since or job["status"] in TERMINAL or left <= 0:
                return job
            await db.notices.wait(notice, left)
        finally:
            db.notices.disarm(notice)


def changed_since(
    db: Database, since: int, job_ids: Sequence[int] = (), owner: str | None = None
) -> list[Job]:
    """Jobs changed after revision `since`, oldest change first, at most `BATCH`."""
    query = select(Job).where(col(Job.rev) > since)
    if job_ids:
        query = query.where(col(Job.id).in_(job_ids))
    if owner is not None:
        query = query.where(Job.owner == owner)
    with db.read() as session:
        return list(session.exec(query.order_by(col(Job.rev)).limit(BATCH)).all())


async def follow_changes(
    db: Database,
    since: int,
    *,
    job_ids: Sequence[int] = (),
    owner: str | None = None,
    idle_s: float = 15.0,
) -> AsyncIterator[Job | None]:
    """Yields each job as it changes after revision `since`, forever; `None` after
    `idle_s` without a change, so a stream can send a keep-alive."""
    quiet_since = time.monotonic()
    while True:
        notice = db.notices.arm()
        try:
            changed = await asyncio.to_thread(changed_since, db, since, job_ids, owner)
            for job in changed:
                since = job.rev
                yield job
            if changed:
                quiet_since = time.monotonic()
                continue
            if time.monotonic() - quiet_since >= idle_s:
                quiet_since = time.monotonic()
                yield None
            await db.notices.wait(notice, idle_s)
        finally:
            db.notices.disarm(notice)
