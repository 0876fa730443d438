"""Where snapshots are kept, and what the job side asks of them.

Each snapshot is one tar, `<home>/snapshots/<sha256>.tar`, named by the sha256 of its bytes,
in a folder only gpuq's account can enter (0700; the files 0600). gpuq never unpacks it:
a job's start copies the tar into the job's run folder (`path_of`), and the job's runner
unpacks it there as the job's owner. A job may name only a snapshot its owner stored
(`owns`). Jobs that name one keep it past GPUQ_SNAPSHOT_RETENTION_DAYS (`retention` reads
their specs), as does an owner asking for it before a submit (`touch`).
"""

import os
import re
import stat
from datetime import datetime
from pathlib import Path

from sqlmodel import Session, col, select, update

from gpuq.contract.spec_fields import SHA256 as SHA256_PATTERN
from service.errors import Unavailable
from service.settings import Settings
from service.store.db import Database, utcnow
from service.store.snapshot_tables import SnapshotOwner, StoredSnapshot

FOLDER = "snapshots"
FOLDER_MODE = 0o700
#: a snapshot's name: the sha256 of its tar, in lowercase hex
SHA256 = re.compile(SHA256_PATTERN)


def folder_of(where: Settings | Path) -> Path:
    """The store's folder under gpuq's state folder (`where`: the settings, or GPUQ_HOME)."""
    home = where.home if isinstance(where, Settings) else where
    return home / FOLDER


def path_of(where: Settings | Path, sha256: str) -> Path:
    """The stored tar of snapshot `sha256` (it may not exist); ValueError for a name that
    is not a sha256, so no caller can be led outside the store."""
    if not SHA256.fullmatch(sha256):
        raise ValueError(f"{sha256!r} is not a sha256 (64 lowercase hex digits)")
    return folder_of(where) / f"{sha256}.tar"


def open_folder(settings: Settings) -> Path:
    """The store's folder, made if need be, a real folder (not a link) of mode 0700."""
    folder = folder_of(settings)
    folder.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode):
        raise Unavailable(f"{folder} is not a folder: gpuq keeps the snapshots there")
    if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) != FOLDER_MODE:
        folder.chmod(FOLDER_MODE)
    return folder


def owns(db: Database, owner: str, sha256: str) -> bool:
    """Whether `owner` stored snapshot `sha256` (and so a job of theirs may name it)."""
    with db.read() as session:
        return session.get(SnapshotOwner, (sha256, owner)) is not None


def touch(db: Database, sha256: str, at: datetime | None = None) -> None:
    """Marks snapshot `sha256` used at `at` (default now): an owner asked for it, to name
    it in the job they submit next (jobs themselves keep it through their specs)."""
    with db.write() as session:
        session.exec(
            update(StoredSnapshot)
            .where(col(StoredSnapshot.sha256) == sha256)
            .values(last_used_at=at or utcnow())
        )


def owned_bytes(session: Session, owner: str) -> int:
    """What `owner`'s snapshots hold in all (bytes), each counted once."""
    sizes = session.exec(
        select(StoredSnapshot.size)
        .join(SnapshotOwner, col(SnapshotOwner.sha256) == col(StoredSnapshot.sha256))
        .where(SnapshotOwner.owner == owner)
    )
    return sum(sizes.all())
