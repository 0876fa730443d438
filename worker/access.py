"""Whether a job's owner may use the paths its spec names, asked as the owner.

`gpuq serve` runs `python -m worker.access` as the job owner's account (GPUQ_RUN_AS=owner)
with a JSON list of `{"path", "need"}` on stdin (`need`: `read` a file, `exec` a program,
`enter` a folder) and reads back one problem per path (null where there is none). So paths
are judged by the kernel with the owner's own rights (groups, ACLs), not gpuq's; and that
the owner can run this at all shows they can run gpuq's interpreter and code.
Standard library only: every submission waits for it.
"""

import json
import os
import stat
import sys


def path_problem(path: str, need: str) -> str | None:
    """What stops the caller from using `path` as `need` says; None if nothing does."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "does not exist"
    except PermissionError:
        return "cannot be reached: a folder on its path is closed to you"
    except OSError as exc:
        return f"cannot be looked at ({exc.strerror})"
    if need == "enter":
        if not stat.S_ISDIR(mode):
            return "is not a directory"
        return None if os.access(path, os.X_OK) else "is a directory you cannot enter"
    if not stat.S_ISREG(mode):
        return "is not a file"
    if need == "exec":
        return None if os.access(path, os.X_OK) else "is not executable by you"
    try:
        with open(path, "rb"):
            return None
    except OSError:
        return "is not readable by you"


def main() -> int:
    checks = json.load(sys.stdin)
    json.dump([path_problem(c["path"], c["need"]) for c in checks], sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
