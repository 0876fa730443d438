"""`POST /v1/snapshots`: an upload checked, then stored once by its sha256 and owned by its
uploader. Bytes already stored cost nothing more: the upload is dropped and its uploader
added as an owner."""

import asyncio
from collections.abc import AsyncIterable
from dataclasses import dataclass
from datetime import datetime

from sqlmodel import Session

from service.settings import Settings
from service.snapshots.refusals import MIB, NotATar, past_snapshot_quota, snapshot_too_large
from service.snapshots.store import open_folder, owned_bytes, path_of
from service.snapshots.tar_check import count_files
from service.snapshots.upload import Upload
from service.store.db import Database, utcnow
from service.store.snapshot_tables import SnapshotOwner, StoredSnapshot


@dataclass(frozen=True)
class Received:
    snapshot: StoredSnapshot
    #: False: the caller had stored those bytes already (someone else's count as new: a
    #: member never learns that another stored the same bytes)
    created: bool
    stored_at: datetime  #: when the caller first stored them


async def receive_snapshot(
    db: Database,
    settings: Settings,
    body: AsyncIterable[bytes],
    owner: str,
    *,
    claimed: str | None = None,
    length: int | None = None,
) -> Received:
    """Stores the tar `body` for `owner`. `claimed`: the sha256 the client computed (400 if
    the bytes hash otherwise); `length`: the body's Content-Length, if it gave one. 413 over
    GPUQ_SNAPSHOT_MAX_MB (refused before reading when `length` says so) or past the owner's
    GPUQ_SNAPSHOT_QUOTA_MB; 400 for an empty body, a tar it cannot read or a member it
    refuses (`tar_check`)."""
    max_bytes = settings.snapshot_max_mb * MIB
    if length is not None and length > max_bytes:
        raise snapshot_too_large(settings)
    folder = await asyncio.to_thread(open_folder, settings)
    upload = Upload(folder)
    try:
        await upload.fill(body, max_bytes, snapshot_too_large(settings))
        return await asyncio.to_thread(_keep, db, settings, upload, owner, claimed)
    finally:
        upload.discard()


def _keep(
    db: Database, settings: Settings, upload: Upload, owner: str, claimed: str | None
) -> Received:
    if upload.size == 0:
        raise NotATar(
            "the body is empty: send the snapshot's tar (Content-Type: application/x-tar)"
        )
    sha256 = upload.sha256
    if claimed is not None and claimed != sha256:
        raise NotATar(
            f"sha256: the body's sha256 is {sha256}, not {claimed}: it changed on the way"
        )
    with db.read() as session:
        # Bytes stored already were checked when they were.
        files = None if session.get(StoredSnapshot, sha256) else count_files(upload.path)
    now = utcnow()
    with db.write() as session:
        # Under the write lock: the collector (`retention`) removes files under it too.
        snapshot = session.get(StoredSnapshot, sha256)
        new = snapshot is None
        if snapshot is None:
            snapshot = StoredSnapshot(
                sha256=sha256,
                size=upload.size,
                files=count_files(upload.path) if files is None else files,
                created_at=now,
            )
            session.add(snapshot)
            session.flush()  # before its owner's row, which refers to it
        mine = session.get(SnapshotOwner, (sha256, owner))
        if mine is None:
            _check_quota(session, settings, owner, upload.size)
            mine = SnapshotOwner(sha256=sha256, owner=owner, added_at=now)
            session.add(mine)
        if not new:
            snapshot.last_used_at = now  # kept a while for the job about to name it
        final = path_of(settings, sha256)
        if new or not final.exists():  # (its file lost: this upload brings it back)
            upload.place(final)
        return Received(snapshot, mine.added_at == now, mine.added_at)


def _check_quota(session: Session, settings: Settings, owner: str, size: int) -> None:
    used = owned_bytes(session, owner)
    if used + size > settings.snapshot_quota_mb * MIB:
        raise past_snapshot_quota(settings, owner, used, size)
