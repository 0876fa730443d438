"""Opening a file in a run directory that a job's own processes may have changed.

gpuq may run as root, and a job running as its owner controls its run directory: a name
there may have become a link to a file only root can read, or a FIFO that never answers.
`open_inside` opens only a regular file that really lies inside the given folder, judged
on the opened file itself, so nothing can be swapped between the check and the read.
"""

import os
import stat
from pathlib import Path
from typing import BinaryIO


def open_inside(path: Path, *folders: Path) -> BinaryIO:
    """`path` opened for reading; `FileNotFoundError` if it is missing, `PermissionError` if
    it is not a regular file inside one of `folders` (symlinks followed)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        real = Path(os.readlink(f"/proc/self/fd/{fd}"))
        inside = any(real.is_relative_to(folder.resolve()) for folder in folders)
        if not stat.S_ISREG(os.fstat(fd).st_mode) or not inside:
            raise PermissionError(f"{path} is not a regular file inside {folders[0]}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
