"""Why an upload is refused, beside the families of `service.errors`: each maps to its HTTP
status where those do (`service.api.errors`)."""

from service.errors import GpuqError
from service.settings import Settings

MIB = 1024 * 1024


class NotATar(GpuqError):
    """A body that is not a snapshot gpuq stores: empty, cut short, not a tar, a member it
    refuses, or not the bytes the client hashed (400)."""


class TooLarge(GpuqError):
    """A snapshot over GPUQ_SNAPSHOT_MAX_MB, or one that would take its owner's snapshots
    over GPUQ_SNAPSHOT_QUOTA_MB (413)."""

    status_code = 413


def snapshot_too_large(settings: Settings) -> TooLarge:
    return TooLarge(
        f"the snapshot is larger than GPUQ_SNAPSHOT_MAX_MB ({settings.snapshot_max_mb} MiB): "
        "leave big files out with .gpuqignore (or .gitignore), or run with --no-snapshot"
    )


def past_snapshot_quota(settings: Settings, owner: str, used: int, size: int) -> TooLarge:
    return TooLarge(
        f"{owner}'s snapshots hold {mib(used)}; this one ({mib(size)}) would take them past "
        f"GPUQ_SNAPSHOT_QUOTA_MB ({settings.snapshot_quota_mb} MiB). Snapshots no job has "
        f"used for GPUQ_SNAPSHOT_RETENTION_DAYS ({settings.snapshot_retention_days:g}) are "
        "removed; an admin can raise the quota"
    )


def mib(size: int) -> str:
    return f"{size / MIB:.1f} MiB"
