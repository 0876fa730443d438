"""The snapshot tables: each stored snapshot of a project (`snapshot`), named by the sha256
of its tar, and who stored it (`snapshot_owner`). Written only by `service.snapshots`."""

from datetime import datetime

from sqlalchemy import BigInteger
from sqlmodel import Field, SQLModel

from service.store.db import utc_field, utcnow


class StoredSnapshot(SQLModel, table=True):
    """One tar in `<home>/snapshots/`, named by its sha256."""

    __tablename__ = "snapshot"

    sha256: str = Field(primary_key=True)
    size: int = Field(sa_type=BigInteger)  #: the tar's bytes
    files: int  #: the regular files in it
    created_at: datetime = utc_field(default_factory=utcnow)
    #: when an owner last stored or asked for it; None: never (jobs that name it keep it
    #: through their specs: `service.snapshots.retention`)
    last_used_at: datetime | None = utc_field(default=None)


class SnapshotOwner(SQLModel, table=True):
    """A user who stored a snapshot: the same bytes uploaded by two users are stored once
    and owned by both, and count once against each one's quota."""

    __tablename__ = "snapshot_owner"

    sha256: str = Field(primary_key=True, foreign_key="snapshot.sha256")
    owner: str = Field(primary_key=True, index=True)
    added_at: datetime = utc_field(default_factory=utcnow)
