"""The snapshot's size limit, checked before anything is sent or queued."""

from gpuq.snapshots.errors import SnapshotTooLarge
from gpuq.snapshots.files import Project

MIB = 2**20
NAMED = 5  #: how many of the largest files the refusal names


def check_size(project: Project, max_mb: float) -> None:
    """Raises SnapshotTooLarge, naming the largest files and how to leave them out, when
    the project's files hold more than `max_mb` MiB (GPUQ_SNAPSHOT_MAX_MB)."""
    total = project.total_size
    if total <= max_mb * MIB:
        return
    by_size = sorted(zip(project.sizes, project.files, strict=True), key=lambda x: -x[0])
    largest = tuple((name, size) for size, name in by_size[:NAMED])
    lines = [
        f"the snapshot of {project.root} would hold {size_text(total)}, over the limit of "
        f"{max_mb:g} MiB (GPUQ_SNAPSHOT_MAX_MB). Its largest files:",
        *(f"  {name} {size_text(size)}" for name, size in largest),
        "To leave them out, add them to .gpuqignore (or .gitignore), or run with --no-snapshot.",
    ]
    raise SnapshotTooLarge("\n".join(lines), total=total, largest=largest)


def size_text(size: int) -> str:
    """`size` bytes for a person: "812 MiB", "3.4 MiB", "95 KiB"."""
    if size < MIB:
        return f"{size / 1024:.0f} KiB"
    value = size / MIB
    return f"{value:.0f} MiB" if value >= 10 else f"{value:.1f} MiB"
