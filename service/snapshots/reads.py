"""Who may see a snapshot, and what they see: its owners (the users who stored it) and
admins read it; another member never does, nor learns whether it exists: their 404 is the
one a snapshot nobody stored gets."""

from datetime import datetime
from typing import BinaryIO

from sqlmodel import col, select

from service.errors import NotFound
from service.settings import Settings
from service.snapshots.public import SnapshotListing, SnapshotPublic
from service.snapshots.refusals import MIB
from service.snapshots.store import owned_bytes, path_of, touch
from service.store.db import Database, utcnow
from service.store.snapshot_tables import SnapshotOwner, StoredSnapshot

#: a HEAD from an owner marks the snapshot used at most this often: the job they submit next
#: names it, and the collector must not take it in between
KEEP_ALIVE_S = 3600


def readable_snapshot(
    db: Database, sha256: str, caller: str, *, admin: bool
) -> tuple[StoredSnapshot, datetime | None]:
    """Snapshot `sha256` and when `caller` stored it, for its owners and admins; NotFound
    for others in the words a snapshot nobody stored gets, so a member never learns
    whether someone else stored it."""
    with db.read() as session:
        snapshot = session.get(StoredSnapshot, sha256)
        mine = session.get(SnapshotOwner, (sha256, caller))
        if snapshot is None or (mine is None and not admin):
            raise NotFound(f"you stored no snapshot {sha256}")
        return snapshot, mine.added_at if mine else None


def stored_for(db: Database, settings: Settings, sha256: str, owner: str) -> bool:
    """Whether `owner` stored snapshot `sha256`, its file there too: what the CLI asks
    before uploading. Yes marks it used, so that it outlives the submission that follows."""
    with db.read() as session:
        snapshot = session.get(StoredSnapshot, sha256)
        if snapshot is None or session.get(SnapshotOwner, (sha256, owner)) is None:
            return False
    if not path_of(settings, sha256).exists():
        return False  # lost: an upload brings it back
    now = utcnow()
    if (now - (snapshot.last_used_at or snapshot.created_at)).total_seconds() > KEEP_ALIVE_S:
        touch(db, sha256, now)
    return True


def open_tar(
    db: Database, settings: Settings, sha256: str, caller: str, *, admin: bool
) -> BinaryIO:
    """The stored tar of snapshot `sha256`, opened, for its owners and admins."""
    readable_snapshot(db, sha256, caller, admin=admin)
    try:
        return path_of(settings, sha256).open("rb")
    except FileNotFoundError:
        raise NotFound(
            f"snapshot {sha256} is recorded but its file is gone; upload it again"
        ) from None


def snapshots_of(db: Database, settings: Settings, owner: str) -> SnapshotListing:
    """`owner`'s snapshots, the most recently stored first, with what they hold in all."""
    with db.read() as session:
        rows = session.exec(
            select(StoredSnapshot, SnapshotOwner.added_at)
            .join(SnapshotOwner, col(SnapshotOwner.sha256) == col(StoredSnapshot.sha256))
            .where(SnapshotOwner.owner == owner)
            .order_by(col(SnapshotOwner.added_at).desc(), col(StoredSnapshot.sha256))
        ).all()
        total = owned_bytes(session, owner)
    return SnapshotListing(
        snapshots=[SnapshotPublic.of(row, stored_at) for row, stored_at in rows],
        total_bytes=total,
        quota_bytes=settings.snapshot_quota_mb * MIB,
    )
