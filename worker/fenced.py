"""A job's processes enter its fence: the cgroups gpuq made for it before it starts.

gpuq (root) makes the job's cgroups (`service.executors.fences`) and names their folders
in the launcher's request (`"fence"`) and in the job's environment (`GPUQ_FENCE`, joined
by `:`; a job may read its own limits there). Whatever becomes the job's runner or its
warm training process enters them itself while it is still root, before it drops to the
job's owner (`enter`): a
process moves into a cgroup by writing `0` (itself) to its `cgroup.procs`, and every child
it starts later is born inside. The runner then checks that it is inside before the job's
program runs (`await_inside`), which covers the one start that cannot enter by itself (a
runner started without the launcher, which gpuq moves in from outside).

gpuq's own processes keep the kernel's OOM killer away (`oom_score_adj` -500 where they
may); a job's must not inherit that: entering the fence raises its score to 200, above
gpuq's on every box.
"""

import os
import time
from collections.abc import Sequence

from gpuq.contract.processes import JOB_OOM_SCORE, set_oom_score

#: how long a runner waits to be moved into its fence from outside before it gives up
ENTRY_WAIT_S = 10.0
PROC_CGROUP = "/proc/self/cgroup"


def enter(folders: Sequence[str]) -> None:
    """Moves this process into each cgroup folder of its job's fence (none: the box has no
    fences), and gives it a job's OOM score; OSError if the kernel refuses (the job must
    not start unfenced)."""
    for folder in folders:
        with open(os.path.join(folder, "cgroup.procs"), "w") as procs:
            procs.write("0")
    job_oom_score()


def job_oom_score() -> None:
    """This job process's OOM score: above gpuq's own, so the kernel's OOM killer takes a
    job's process first (raising a score needs no privilege)."""
    set_oom_score(JOB_OOM_SCORE)


def inside(folders: Sequence[str], proc_cgroup: str = PROC_CGROUP) -> bool:
    """Whether this process is in every cgroup of its fence (`folders`, all of one name):
    as many of the hierarchies it belongs to hold it in a cgroup of that name."""
    if not folders:
        return True
    name = os.path.basename(folders[0].rstrip("/"))
    try:
        with open(proc_cgroup) as lines:
            paths = [line.rstrip("\n").split(":", 2)[2] for line in lines if line.count(":") >= 2]
    except OSError:
        return False
    return sum(path.rsplit("/", 1)[-1] == name for path in paths) >= len(folders)


def await_inside(fence: str | None, wait_s: float = ENTRY_WAIT_S) -> bool:
    """Waits until this process is inside its fence (`GPUQ_FENCE`'s folders; None or empty:
    the job has none); False if it is not inside within `wait_s`."""
    folders = [f for f in (fence or "").split(":") if f]
    deadline = time.monotonic() + wait_s
    while not inside(folders):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
