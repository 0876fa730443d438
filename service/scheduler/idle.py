"""The idle rule (part of `enforce`): a running job that holds GPUs but trains no more.

A job is idle once, past its start-up grace (`GPUQ_IDLE_GRACE_S`), it has reported no
training step for `GPUQ_IDLE_AFTER_S` while it holds memory on its GPUs and they stay
under `GPUQ_IDLE_UTIL_PCT` utilisation (NVML); on simulated GPUs the step reports alone
decide. It gets a warning (its JSON's `warnings` and `idle_since`, the dashboard,
Prometheus, a webhook notification), and after `GPUQ_IDLE_KILL_AFTER_S` more (0: never)
it is stopped like a time limit (SIGTERM, then SIGKILL) and ends `failed`/`idle`. A spec
with `idle_exempt` is never idle; a step reported again clears it.
"""

import logging
import signal
import time

from gpuq.contract.states import Reason
from service.jobs import writes
from service.scheduler.isolation import apart
from service.scheduler.running import Books, Running
from service.webhooks.queue import queue_event

log = logging.getLogger(__name__)


def check_idle(books: Books) -> None:
    now = time.monotonic()
    for running in list(books.running.values()):
        with apart(running.job_id, "apply the idle rule"):
            _check(books, running, now)


def _check(books: Books, running: Running, now: float) -> None:
    """Applies the idle rule to one running job."""
    settings = books.settings
    activity = running.activity
    if not running.gpus or activity.exempt or running.killed:
        return
    if activity.idle_since is not None:
        if activity.last_step > activity.idle_since:
            _trains_again(books, running)
        elif settings.idle_kill_after_s and now - activity.idle_since >= (
            settings.idle_kill_after_s
        ):
            _stop_idle(books, running, now)
        return
    quiet = now - activity.last_step
    if now - activity.since < settings.idle_grace_s or quiet < settings.idle_after_s:
        return
    if not _gpus_busy(books, running):
        _declare_idle(books, running, quiet)


def _gpus_busy(books: Books, running: Running) -> bool:
    """Whether NVML's last sample (`caps`) says the job is not idle: one of its GPUs is
    busy, or (a batch job, which may be loading its data) it holds no memory on them. False
    on simulated GPUs, where steps alone decide."""
    if books.gpus.inventory.probe is None:
        return False
    memory = running.memory
    busy = memory.util_pct is not None and memory.util_pct >= books.settings.idle_util_pct
    return busy or (memory.held_mb <= 0 and not running.activity.interactive)


def _idle_words(running: Running, quiet_s: float) -> str:
    noun = "GPU" if len(running.gpus) == 1 else "GPUs"
    return f"no training step for {_span(quiet_s)} while holding {len(running.gpus)} {noun}"


def _declare_idle(books: Books, running: Running, quiet_s: float) -> None:
    settings = books.settings
    words = _idle_words(running, quiet_s)
    then = (
        f"it will be stopped after {_span(settings.idle_kill_after_s)} more idle"
        if settings.idle_kill_after_s
        else "it is not stopped for it (GPUQ_IDLE_KILL_AFTER_S=0)"
    )
    warning = f"idle: {words}; {then}"
    log.warning("job %d: %s", running.job_id, warning)
    running.activity.idle_since = time.monotonic()
    with books.db.write() as session:
        job = writes.record_idle(session, running.job_id, warning)
        if job is not None:
            queue_event(session, job, "idle")


def _trains_again(books: Books, running: Running) -> None:
    log.info("job %d: trains again; no longer idle", running.job_id)
    running.activity.idle_since = None
    with books.db.write() as session:
        writes.record_idle(session, running.job_id, None)


def _stop_idle(books: Books, running: Running, now: float) -> None:
    quiet = now - running.activity.last_step
    words = _idle_words(running, quiet)
    log.warning("job %d: %s; stopping it (GPUQ_IDLE_KILL_AFTER_S)", running.job_id, words)
    with books.db.write() as session:
        writes.record_stop(session, running.job_id, Reason.idle, words)
    # As for a time limit: SIGTERM now, SIGKILL after the grace (`stop_overdue`).
    books.executor.signal(running.job_id, signal.SIGTERM)
    running.activity.exempt = True  # stopped once: nothing more to decide


def _span(seconds: float) -> str:
    if seconds >= 5400:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 90:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"
