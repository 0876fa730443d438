"""The one door into folders a job controls: its run folder, checkpoints and artifacts.

gpuq may work as root, and a job's owner can change anything in the job's folders while
gpuq looks: a name can become a link to a file only root may read, a FIFO that never
answers, or a terminal that, opened by a process without one, becomes its controlling
terminal (and can then hang it up). So nothing here follows a link or opens anything but
what it was asked for:

- a name is resolved beneath the folder's own descriptor, with no link followed on the way
  or at the end (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
  RESOLVE_NO_MAGICLINKS` where the kernel has it, one `O_NOFOLLOW` component at a time
  where it does not), to an `O_PATH` descriptor, which opens nothing;
- its type is judged on that descriptor (`fstat`), before anything is opened;
- only then is it opened, through that descriptor, with `O_NOCTTY | O_NONBLOCK |
  O_CLOEXEC`.

The folder itself is named by gpuq (its parents are gpuq's) and must not be a link.
`open_regular` is the same door for a path outside any job's folder that a job named (its
data): links are followed there, but only to find the file, never to open something else.
"""

import ctypes
import errno
import os
import socket
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import BinaryIO, cast

#: openat2(2): the same number on every Linux architecture
SYS_OPENAT2 = 437
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
_RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
_PATH = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
#: how every file is opened once its type is known: never a controlling terminal, never a
#: wait on a FIFO's other end, never kept by what gpuq starts
OPEN_FLAGS = os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC
#: how deep `regular_files` walks, and how many files it lists at most
MAX_DEPTH = 32
MAX_FILES = 100_000


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
#: whether the kernel (or a seccomp filter in front of it) lets us use openat2
_has_openat2 = True


def _parts(name: str | PurePosixPath) -> list[str]:
    """The components of a relative name; `PermissionError` for one that could leave."""
    parts = str(name).split("/")
    if not str(name) or any(p in ("", ".", "..") for p in parts) or "\0" in str(name):
        raise PermissionError(errno.EACCES, "not a plain relative name", str(name))
    return parts


def _openat2(folder: int, name: str) -> int:
    how = _OpenHow(_PATH, 0, _RESOLVE)
    fd = _libc.syscall(
        ctypes.c_long(SYS_OPENAT2),
        ctypes.c_int(folder),
        ctypes.c_char_p(os.fsencode(name)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), name)
    return int(fd)


def _walk_beneath(folder: int, parts: list[str]) -> int:
    """One component at a time, each `O_NOFOLLOW`: a link on the way is an error, a link
    at the end is an `O_PATH` descriptor of the link itself (refused by its type)."""
    current = folder
    try:
        for part in parts[:-1]:
            step = os.open(part, _PATH | os.O_DIRECTORY, dir_fd=current)
            if current != folder:
                os.close(current)
            current = step
        return os.open(parts[-1], _PATH, dir_fd=current)
    finally:
        if current != folder:
            os.close(current)


def _resolve_beneath(folder: int, name: str | PurePosixPath) -> int:
    """An `O_PATH` descriptor of `name` beneath `folder`, no link followed."""
    global _has_openat2
    parts = _parts(name)
    if _has_openat2:
        try:
            return _openat2(folder, "/".join(parts))
        except OSError as exc:
            if exc.errno not in (errno.ENOSYS, errno.EPERM):
                raise
            _has_openat2 = False  # an old kernel, or a seccomp filter: walk it ourselves
    return _walk_beneath(folder, parts)


@contextmanager
def _folder(folder: Path) -> Iterator[int]:
    fd = os.open(folder, _PATH | os.O_DIRECTORY)
    try:
        yield fd
    finally:
        os.close(fd)


@contextmanager
def _found(folder: Path, name: str | PurePosixPath) -> Iterator[tuple[int, os.stat_result]]:
    """`name` beneath `folder` as an `O_PATH` descriptor, with what it is."""
    with _folder(folder) as top:
        fd = _resolve_beneath(top, name)
    try:
        yield fd, os.fstat(fd)
    finally:
        os.close(fd)


def _reopen(fd: int, flags: int) -> int:
    """The file an `O_PATH` descriptor names, opened: the same inode, whatever its name
    became since."""
    return os.open(f"/proc/self/fd/{fd}", flags | OPEN_FLAGS)


def _file(fd: int, mode: str) -> BinaryIO:
    os.set_blocking(fd, True)
    try:
        return cast(BinaryIO, os.fdopen(fd, mode))
    except BaseException:
        os.close(fd)
        raise


def _not_regular(where: object) -> PermissionError:
    return PermissionError(errno.EACCES, "not a regular file", str(where))


def open_file(folder: Path, name: str | PurePosixPath, *, append: bool = False) -> BinaryIO:
    """The regular file `name` beneath `folder`, for reading (or appending);
    `FileNotFoundError` if it is missing, `PermissionError` if it is anything else or a
    link leads to it, `OSError` for the rest."""
    with _found(folder, name) as (fd, found):
        if not stat.S_ISREG(found.st_mode):
            raise _not_regular(folder / str(name))
        flags = os.O_WRONLY | os.O_APPEND if append else os.O_RDONLY
        return _file(_reopen(fd, flags), "ab" if append else "rb")


def lstat(folder: Path, name: str | PurePosixPath) -> os.stat_result:
    """What `name` beneath `folder` is, without opening it or following a link."""
    with _found(folder, name) as (_, found):
        return found


def exists(folder: Path, name: str | PurePosixPath) -> bool:
    try:
        lstat(folder, name)
    except OSError:
        return False
    return True


def regular_files(folder: Path, name: str) -> list[tuple[str, os.stat_result]]:
    """Every regular file beneath `folder/name`, by its name relative to that, sorted; no
    link is followed and nothing but folders is opened. Empty if there is no such folder."""
    try:
        with _found(folder, name) as (fd, found):
            if not stat.S_ISDIR(found.st_mode):
                return []
            top = _reopen(fd, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return []
    found_files: list[tuple[str, os.stat_result]] = []
    _list_regular_files(top, "", 0, found_files)
    return sorted(found_files, key=lambda f: f[0])


def _list_regular_files(
    fd: int, prefix: str, depth: int, into: list[tuple[str, os.stat_result]]
) -> None:
    """Lists folder `fd` (and closes it) into `into`."""
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                if len(into) >= MAX_FILES:
                    return
                try:
                    found = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(found.st_mode):
                    into.append((prefix + entry.name, found))
                elif stat.S_ISDIR(found.st_mode) and depth < MAX_DEPTH:
                    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | OPEN_FLAGS
                    try:
                        inner = os.open(entry.name, flags, dir_fd=fd)
                    except OSError:
                        continue  # swapped for something else since it was listed
                    _list_regular_files(inner, f"{prefix}{entry.name}/", depth + 1, into)
    finally:
        os.close(fd)


def connect(folder: Path, name: str, sock: socket.socket) -> None:
    """Connects `sock` to the Unix socket `name` beneath `folder` (no link followed);
    `PermissionError` if it is anything but a socket."""
    with _found(folder, name) as (fd, found):
        if not stat.S_ISSOCK(found.st_mode):
            raise PermissionError(errno.EACCES, "not a socket", str(folder / name))
        # Through the descriptor: the socket itself, and a path far under 108 bytes.
        sock.connect(f"/proc/self/fd/{fd}")


def open_regular(path: Path, *roots: Path) -> BinaryIO:
    """A regular file a job named outside its folders (its data), for reading: links are
    followed to find it (an `O_PATH` descriptor opens nothing), and it is opened only if it
    is a regular file, inside one of `roots` when any are given (judged on the file found,
    so nothing can be swapped between the check and the read)."""
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        real = Path(os.readlink(f"/proc/self/fd/{fd}"))
        inside = not roots or any(real.is_relative_to(root.resolve()) for root in roots)
        if not stat.S_ISREG(os.fstat(fd).st_mode) or not inside:
            where = f" inside {roots[0]}" if roots else ""
            raise PermissionError(errno.EACCES, f"not a regular file{where}", str(path))
        return _file(_reopen(fd, os.O_RDONLY), "rb")
    finally:
        os.close(fd)
