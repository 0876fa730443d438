"""A project's snapshot, made on the submitting machine: which files it holds (`collect`),
whether it is small enough to send (`check_size`), its deterministic tar and that tar's
sha256 written in one pass (`write_tar`, `snapshot_to_file`), and where its code came from
(`provenance`). The CLI sends the tar to `POST /v1/snapshots` unless the server already
holds that sha256.

    project = collect(Path.cwd(), outside_git=False)   # None: not in git, run in place
    check_size(project, max_mb=100)                    # SnapshotTooLarge names the files
    tar, path = snapshot_to_file(project, tmp)         # tar.sha256, tar.size, tar.files

Every error is a SnapshotError whose message is meant for the person at the terminal.
"""

from gpuq.snapshots.errors import SnapshotChanged, SnapshotError, SnapshotTooLarge
from gpuq.snapshots.files import Project, collect
from gpuq.snapshots.limits import check_size
from gpuq.snapshots.provenance import provenance
from gpuq.snapshots.tarball import SnapshotTar, snapshot_to_file, write_tar

__all__ = [
    "Project",
    "SnapshotChanged",
    "SnapshotError",
    "SnapshotTar",
    "SnapshotTooLarge",
    "check_size",
    "collect",
    "provenance",
    "snapshot_to_file",
    "write_tar",
]
