"""The shapes of snapshots the API returns."""

from datetime import datetime

from pydantic import BaseModel, Field

from service.store.snapshot_tables import StoredSnapshot


class SnapshotPublic(BaseModel):
    sha256: str = Field(description="The sha256 of the snapshot's tar: its name.")
    size: int = Field(description="The tar's size in bytes.")
    files: int = Field(description="The regular files in it.")
    created_at: datetime = Field(
        description="When you first stored it (for an admin reading another's: when anyone "
        "first did). The same bytes stored by someone else before are never told apart."
    )
    last_used_at: datetime | None = Field(
        description="When an owner last stored it or asked whether it is stored; null: "
        "never. Jobs that name it keep it too: retention reads them."
    )

    @classmethod
    def of(cls, row: StoredSnapshot, stored_at: datetime | None = None) -> "SnapshotPublic":
        """`row` as seen by an owner who first stored it at `stored_at`."""
        return cls(
            sha256=row.sha256,
            size=row.size,
            files=row.files,
            created_at=stored_at or row.created_at,
            last_used_at=row.last_used_at,
        )


class SnapshotListing(BaseModel):
    snapshots: list[SnapshotPublic] = Field(
        description="The caller's snapshots, the most recently stored first."
    )
    total_bytes: int = Field(description="What they hold in all, each counted once.")
    quota_bytes: int = Field(description="What they may hold in all (GPUQ_SNAPSHOT_QUOTA_MB).")
