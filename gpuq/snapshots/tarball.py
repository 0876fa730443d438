"""The snapshot's tar, written and hashed in one pass: each file read once, in chunks, and
each byte hashed as it is written, so a 50 MB project never sits in memory.

The same tree always makes the same bytes, so the same sha256 (the server then already
holds it and nothing is uploaded): names sorted; no directory entries (the server's
unpacking makes the folders, and git keeps no empty folders either); mtime 0; uid and gid
0 with no user or group names; mode 0o755 for a file with any execute bit, else 0o644;
a symlink is a link member with its target's text, never followed (0o777, as links are).
POSIX pax format: ustar headers, with a pax header only where a name or target needs one
(over 100 bytes, or not ASCII).

A file is read as it is when opened; if it changes size or time, or disappears, before it
has been read through, `SnapshotChanged` is raised naming it: the tar written so far is
incomplete, never passed off as whole.
"""

import hashlib
import os
import stat
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from gpuq.snapshots.errors import SnapshotChanged, SnapshotError
from gpuq.snapshots.files import Project

CHUNK = 1 << 20  #: bytes read from a file at a time
BLOCK = tarfile.BLOCKSIZE
RECORD = tarfile.RECORDSIZE  #: the tar ends padded to this, as tar(1) and tarfile end it
#: O_NOFOLLOW: a file swapped for a link since it was collected is refused, not followed;
#: O_NONBLOCK: one swapped for a FIFO does not hang the open (its fstat then refuses it).
OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True)
class SnapshotTar:
    """A snapshot's tar as written: its name on the server is its sha256."""

    sha256: str  #: of exactly the tar's bytes
    size: int  #: the tar's bytes
    files: int  #: members: files and symlinks


class HashingWriter:
    """`out`, hashing and counting every byte written to it."""

    def __init__(self, out: BinaryIO):
        self.out = out
        self.hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes | memoryview) -> None:
        try:
            self.out.write(data)
        except OSError as exc:  # told apart from reading the project's files
            raise SnapshotError(f"cannot write the snapshot: {exc.strerror or exc}") from exc
        self.hash.update(data)
        self.size += len(data)


def write_tar(project: Project, out: BinaryIO) -> SnapshotTar:
    """Writes the project's deterministic tar to `out`, hashing it as it goes. On an
    exception what `out` got is incomplete; SnapshotChanged when a file changed."""
    stream = HashingWriter(out)
    buffer = memoryview(bytearray(CHUNK))
    for name in project.files:
        path = os.path.join(project.root, name)
        try:
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                stream.write(member_header(name, tarfile.SYMTYPE, linkname=os.readlink(path)))
            elif stat.S_ISREG(mode):
                write_file_member(stream, path, name, buffer)
            else:
                raise SnapshotChanged(name, "stopped being a file")
        except (FileNotFoundError, NotADirectoryError):
            raise SnapshotChanged(name, "disappeared") from None
        except OSError as exc:
            raise SnapshotError(f"cannot read {name}: {exc.strerror}") from None
    stream.write(bytes(2 * BLOCK))  # the end-of-archive marker
    stream.write(bytes(-stream.size % RECORD))
    return SnapshotTar(stream.hash.hexdigest(), stream.size, len(project.files))


def write_file_member(stream: HashingWriter, path: str, name: str, buffer: memoryview) -> None:
    """The file at `path` as one member: its header, then its bytes read in chunks."""
    try:
        fd = os.open(path, OPEN_FLAGS)
    except (FileNotFoundError, PermissionError):
        raise
    except OSError:  # ELOOP: a link now, which O_NOFOLLOW refuses to open
        raise SnapshotChanged(name, "stopped being a file") from None
    with open(fd, "rb", buffering=0) as file:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise SnapshotChanged(name, "stopped being a file")
        mode = 0o755 if before.st_mode & 0o111 else 0o644
        stream.write(member_header(name, tarfile.REGTYPE, size=before.st_size, mode=mode))
        left = before.st_size
        while left:
            read = file.readinto(buffer[: min(left, CHUNK)])
            if not read:
                raise SnapshotChanged(name, "shrank")
            stream.write(buffer[:read])
            left -= read
        after = os.fstat(fd)
        if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
            raise SnapshotChanged(name, "changed")
    stream.write(bytes(-before.st_size % BLOCK))


def member_header(
    name: str, kind: bytes, *, size: int = 0, mode: int = 0o777, linkname: str = ""
) -> bytes:
    """A member's header blocks, with nothing of the machine in them but what is named."""
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = size
    info.mode = mode
    info.linkname = linkname
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def snapshot_to_file(project: Project, directory: Path) -> tuple[SnapshotTar, Path]:
    """The project's tar written to a new file (0600) in `directory`, and that file; on an
    exception no file is left behind."""
    fd, name = tempfile.mkstemp(prefix="snapshot-", suffix=".tar", dir=directory)
    path = Path(name)
    try:
        with open(fd, "wb") as out:
            snapshot = write_tar(project, out)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return snapshot, path
