"""Snapshots of projects, stored once by the sha256 of their tar (`POST /v1/snapshots`), so
that a job runs the code as it was at submit (`command.snapshot`).

`receive` checks an upload (`upload`, `tar_check`) and stores it, quota'd per user; `reads`
says who may see one, and what they see; `store` is where they are kept and what the job
side asks (`path_of`, `owns`, `touch`); `retention` removes those no job has used for
GPUQ_SNAPSHOT_RETENTION_DAYS.
"""

from service.snapshots.receive import Received, receive_snapshot
from service.snapshots.retention import SnapshotCollector, collect_garbage
from service.snapshots.store import owns, path_of, touch

__all__ = [
    "Received",
    "SnapshotCollector",
    "collect_garbage",
    "owns",
    "path_of",
    "receive_snapshot",
    "touch",
]
