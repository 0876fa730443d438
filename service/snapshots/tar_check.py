"""What a stored snapshot may hold, read from its tar's headers alone: gpuq never unpacks
it, nor opens or follows a path a member names.

Regular files, folders and symbolic links, under relative names without `..`. A link is
kept as the link it is, pointing wherever it points (even `/etc/shadow`): the job's runner
unpacks it as the job's owner (`worker.snapshot_copy`), whose rights are all it ever
follows with. Refused: absolute names, `..`, hard links (which unpack as a copy of
another path's file), devices, FIFOs and any other kind of member.
"""

import tarfile
from pathlib import Path, PurePosixPath

from service.snapshots.refusals import NotATar


def count_files(path: Path) -> int:
    """The regular files in the tar at `path`; `NotATar` naming the first member refused,
    or saying why it is not a readable tar."""
    files = 0
    try:
        # Uncompressed, as `gpuq run` sends it and the job's runner unpacks it.
        with tarfile.open(path, "r:") as tar:
            for member in tar:  # headers only: each member's data is skipped, never read
                problem = refusal(member)
                if problem is not None:
                    raise NotATar(f"snapshot member {member.name!r}: {problem}")
                files += member.isfile()
    # A crafted header (a pax `GNU.sparse.size=x`, a charset that does not decode) raises
    # past TarError, from inside tarfile's own parsing.
    except (tarfile.TarError, ValueError, UnicodeError, OverflowError) as exc:
        raise NotATar(
            f"the body is not a readable tar ({exc}); send an uncompressed tar, "
            "Content-Type: application/x-tar"
        ) from None
    return files


def refusal(member: tarfile.TarInfo) -> str | None:
    """Why `member` may not be in a snapshot; None if it may."""
    name = PurePosixPath(member.name)
    if member.name.startswith("/") or name.is_absolute():
        return "an absolute name; members are relative to the project's folder"
    if ".." in name.parts:
        return "a name with '..'; members stay inside the project's folder"
    if member.islnk():
        return f"a hard link (to {member.linkname!r}); store the file itself, or a symlink"
    if member.isdev():
        return "a device or FIFO; a snapshot holds files, folders and symbolic links"
    if not (member.isfile() or member.isdir() or member.issym()):
        return f"a member of type {member.type!r}; a snapshot holds files, folders and links"
    return None
