"""Signalling every process in a fence, a fork racing the signal included: the fence is
frozen first (no process in it runs, so none can fork), every pid it lists is signalled,
then it is thawed; a kill repeats that until nothing is left."""

import logging
import signal
import time
from collections.abc import Callable

from service.executors.fences.cgroup_files import awaited, send_each

log = logging.getLogger(__name__)

#: how long a freeze may take before the signal is sent all the same (a process stuck in
#: the kernel, in uninterruptible sleep, can keep a fence from freezing)
FREEZE_WAIT_S = 1.0
#: how long a kill keeps at it before it gives up on a process the kernel will not end
KILL_TIMEOUT_S = 5.0


def signal_frozen(
    members: Callable[[], set[int]], freeze: Callable[[bool], None], sig: int
) -> None:
    """Sends `sig` to every process in a fence while it is frozen (`freeze(True)`), and
    thaws it again (`freeze(False)`) whatever happens: a frozen fence is a stopped job."""
    freeze(True)
    try:
        send_each(members(), sig)
    finally:
        freeze(False)


def kill_frozen(members: Callable[[], set[int]], freeze: Callable[[bool], None], name: str) -> None:
    """SIGKILLs every process in a fence, frozen, until none is left (or KILL_TIMEOUT_S
    passed, said in the log): a child forked between one listing and the signal is found
    by the next round."""
    deadline = time.monotonic() + KILL_TIMEOUT_S
    while members():
        signal_frozen(members, freeze, signal.SIGKILL)
        if awaited(lambda: not members(), 0.2):
            return
        if time.monotonic() >= deadline:
            log.warning("fence %s: processes %s outlived SIGKILL", name, sorted(members()))
            return
