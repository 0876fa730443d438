"""A daemon thread that takes a step whenever it is woken or its wait ends, until stopped:
the scheduler's loop and the webhook notifier's."""

import logging
import threading
from collections.abc import Callable

#: how long `stop` waits for the step in progress to end
STOP_WAIT_S = 30


class Background:
    def __init__(self, name: str, step: Callable[[], float | None]) -> None:
        """`step` runs once per wake and returns how long to wait for the next one (None:
        stop)."""
        self.name = name
        self._step = step
        self.woken = threading.Event()
        self.stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops after the step in progress (waiting at most `STOP_WAIT_S` for it)."""
        self.stopping.set()
        self.woken.set()
        if self._thread is not None:
            self._thread.join(timeout=STOP_WAIT_S)

    def wake(self) -> None:
        self.woken.set()

    def started(self) -> bool:
        return self._thread is not None

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self.stopping.is_set():
            self.woken.clear()
            wait_s = self._step()
            if wait_s is None:
                return
            self.woken.wait(wait_s)


def logged(step: Callable[[], None], log: logging.Logger, what: str) -> bool:
    """Runs `step`; an exception is logged (`what` failed; trying again), never raised, so
    one bad step never ends the thread. True if it ran without one."""
    try:
        step()
    except Exception:
        log.exception("%s failed; trying again", what)
        return False
    return True
