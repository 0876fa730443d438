"""The scheduler's process: `python -P -m service.scheduler_process --control-fd N`, started
by `gpuq serve` (`scheduler.remote.SchedulerProcess`), which speaks to it on that socket.

It opens the scheduling half of gpuq (`runtime.open_scheduler`: the scheduler, its
executor and launcher, webhooks; no API) with the settings gpuq serve sends, says `ready`,
then steps when gpuq serve says `wake`, tells it of each of its commits, and answers
`metrics`. It ends when the socket closes (gpuq serve stopped), on SIGTERM, and at once
when gpuq serve dies.
"""

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import NoReturn

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric

from gpuq.contract.processes import never_hung_up, prctl, spared_by_oom_killer
from service.gpus.inventory import InventoryError
from service.runtime import open_scheduler
from service.scheduler import starting
from service.scheduler.loop import Scheduler, SchedulerLocked
from service.scheduler.remote import COMMIT, ERROR, METRICS, READY, WAKE, received
from service.settings import Settings
from service.team.run_as import RunAsError

#: prctl(2): the signal this process gets when the thread that started it ends
PR_SET_PDEATHSIG = 1

log = logging.getLogger("gpuq")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="service.scheduler_process")
    parser.add_argument("--control-fd", type=int, required=True)
    args = parser.parse_args(argv)
    die_with_parent()
    starting.crash_kills = os.getppid()  # the test hook's crash is gpuq serve's
    conn = Connection(args.control_fd)
    settings = Settings.model_validate_json(conn.recv_bytes())
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)
    signal.signal(signal.SIGTERM, _stop)
    never_hung_up()
    spared_by_oom_killer()
    sending = threading.Lock()

    def send(message: bytes) -> None:
        try:
            with sending:
                conn.send_bytes(message)
        except OSError:  # gpuq serve is gone; the socket's end stops this process next
            pass

    # gpuq serve said who jobs run as, and that it found no GPU, as it started.
    said = [logging.getLogger(name) for name in ("service.team.run_as", "service.gpus.inventory")]
    for logger in said:
        logger.setLevel(logging.ERROR)
    try:
        scheduling = open_scheduler(settings)
    except (InventoryError, SchedulerLocked, RunAsError) as exc:  # each says why
        send(ERROR + b" " + str(exc).encode())
        return 1
    except Exception as exc:
        log.exception("the scheduler could not start")
        send(ERROR + f" the scheduler could not start: {exc!r}".encode())
        return 1
    for logger in said:
        logger.setLevel(logging.NOTSET)
    try:
        scheduling.db.notices.forward(lambda: send(COMMIT))
        send(READY)
        _serve(conn, scheduling.scheduler, send)
    finally:
        scheduling.close()
    return 0


def _serve(conn: Connection, scheduler: Scheduler, send: Callable[[bytes], None]) -> None:
    """Does what gpuq serve asks until it closes the socket."""
    for message in received(conn):
        if message == WAKE:
            scheduler.wake()
        elif message == METRICS:
            registry = CollectorRegistry(auto_describe=False)
            registry.register(_Collected(scheduler))
            send(METRICS + generate_latest(registry))


class _Collected:
    """The scheduler's own metrics, as a collector a registry can hold."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def collect(self) -> Iterator[Metric]:
        return self.scheduler.metrics()


def die_with_parent() -> None:
    """SIGKILL this process when gpuq serve ends, however it ends (its main thread started
    this process, so that thread's end is the process's)."""
    parent = os.getppid()
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL, "PR_SET_PDEATHSIG")
    if os.getppid() != parent:  # it ended before the line above
        os._exit(1)


def _stop(signum: int, frame: object) -> NoReturn:
    raise SystemExit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
