"""Removing the snapshots no one uses: one goes, file and record, once no job that is
queued or running names it, none that ended within GPUQ_SNAPSHOT_RETENTION_DAYS did, and
its last use (or its storing, if never used) is older than that too. Jobs name a snapshot
in their spec (`command.snapshot`); sweeps' members and reruns are jobs too.

Also what a crash left in the store's folder: an upload's temporary file, or a tar its
record never reached. `SnapshotCollector` runs all this in the scheduler's process, a
minute after it starts and hourly after that.
"""

import logging
import os
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlmodel import Session, col, delete, func, or_, select

from gpuq.contract.states import TERMINAL, JobStatus
from service.background import Background, logged
from service.settings import Settings
from service.snapshots.store import folder_of, path_of
from service.snapshots.upload import TEMP_PREFIX
from service.store.db import Database, utcnow
from service.store.snapshot_tables import SnapshotOwner, StoredSnapshot
from service.store.tables import Job

log = logging.getLogger(__name__)

COLLECT_EVERY_S = 3600.0
FIRST_AFTER_S = 60.0
#: an upload's temporary file this old was left by a crash (no upload takes a day)
TEMP_LEFT_AFTER_S = 24 * 3600.0
#: a tar with no record this old was placed by an upload whose commit failed
UNRECORDED_AFTER_S = 3600.0
UNFINISHED = [status for status in JobStatus if status not in TERMINAL]
#: rows deleted per statement (SQLite bounds a statement's parameters)
BATCH = 500


def collect_garbage(db: Database, settings: Settings, now: datetime) -> list[str]:
    """Removes the snapshots unused for GPUQ_SNAPSHOT_RETENTION_DAYS before `now` (records
    and files) and the store's leftovers; returns the sha256s of the snapshots removed."""
    since = now - timedelta(days=settings.snapshot_retention_days)
    last_used = func.coalesce(col(StoredSnapshot.last_used_at), col(StoredSnapshot.created_at))
    # What jobs name is read first, outside the write lock (a month of jobs' specs); under
    # it, only the jobs made since then, which may name a snapshot found unused.
    with db.read() as session:
        old = set(session.exec(select(StoredSnapshot.sha256).where(last_used < since)).all())
        unused = old - snapshots_in_use(session, since) if old else set()
        newest = session.exec(select(func.max(Job.id))).one() or 0
    # One write transaction: an upload places its file under the same lock, so the bytes
    # it brings back are never removed after it recorded them.
    with db.write() as session:
        still: set[str] = set()
        for batch in _batches(sorted(unused)):
            still.update(
                session.exec(
                    select(StoredSnapshot.sha256).where(
                        last_used < since, col(StoredSnapshot.sha256).in_(batch)
                    )
                ).all()
            )
        gone = sorted(still - named_since(session, newest))
        for batch in _batches(gone):
            session.exec(delete(SnapshotOwner).where(col(SnapshotOwner.sha256).in_(batch)))
            session.exec(delete(StoredSnapshot).where(col(StoredSnapshot.sha256).in_(batch)))
        for sha256 in gone:
            path_of(settings, sha256).unlink(missing_ok=True)
        _remove_leftovers(session, folder_of(settings), now)
    if gone:
        log.info("removed %d snapshot(s) no job used since %s", len(gone), since.isoformat())
    return gone


def _batches(names: list[str]) -> Iterator[list[str]]:
    """`names` a `BATCH` at a time: one statement's parameters each."""
    for start in range(0, len(names), BATCH):
        yield names[start : start + BATCH]


def _named(session: Session, *where: Any) -> set[str]:
    named = col(Job.spec)[("command", "snapshot")].as_string()
    rows = session.exec(select(named).where(*where, named.is_not(None)).distinct())
    return set(rows.all())


def snapshots_in_use(session: Session, since: datetime) -> set[str]:
    """The snapshots named by a job not yet ended, or by one that ended at `since` or later."""
    return _named(session, or_(col(Job.status).in_(UNFINISHED), col(Job.finished_at) >= since))


def named_since(session: Session, newest: int) -> set[str]:
    """The snapshots named by the jobs made after job `newest`."""
    return _named(session, col(Job.id) > newest)


def _remove_leftovers(session: Session, folder: Path, now: datetime) -> None:
    if not folder.is_dir():
        return
    recorded: set[str] | None = None
    for name, age_s in _ages(folder, now):
        if name.startswith(TEMP_PREFIX) and age_s > TEMP_LEFT_AFTER_S:
            (folder / name).unlink(missing_ok=True)
        elif name.endswith(".tar") and age_s > UNRECORDED_AFTER_S:
            if recorded is None:
                recorded = set(session.exec(select(StoredSnapshot.sha256)).all())
            if name.removesuffix(".tar") not in recorded:
                log.warning("removing %s: a snapshot's tar with no record", folder / name)
                (folder / name).unlink(missing_ok=True)


def _ages(folder: Path, now: datetime) -> Iterable[tuple[str, float]]:
    """Each entry of `folder` and its age in seconds at `now` (those gone meanwhile left out)."""
    with os.scandir(folder) as entries:
        for entry in entries:
            try:
                mtime = entry.stat(follow_symlinks=False).st_mtime
            except FileNotFoundError:
                continue
            yield entry.name, now.timestamp() - mtime


class SnapshotCollector:
    """`collect_garbage` in a thread of its own, hourly (`COLLECT_EVERY_S`)."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings
        self._first = True
        self._loop = Background("gpuq-snapshot-collector", self._step)

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def _step(self) -> float:
        if self._first:  # not at start: gpuq has more urgent things to do then
            self._first = False
            return FIRST_AFTER_S
        logged(self._collect, log, "removing unused snapshots")
        return COLLECT_EVERY_S

    def _collect(self) -> None:
        collect_garbage(self.db, self.settings, utcnow())
