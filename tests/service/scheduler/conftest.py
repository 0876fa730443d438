"""What the scheduler's tests share."""

import signal
from collections.abc import Iterator

import pytest

from service.gpus import registry
from service.gpus.inventory import discover
from service.gpus.registry import GpuRegistry
from service.scheduler.loop import Scheduler


@pytest.fixture
def scheduler(db, settings) -> Iterator[Scheduler]:
    """A scheduler on the simulated GPUs, driven step by step; what it started is killed
    after the test."""
    inventory = discover(settings.gpus)
    registry.sync(db, inventory)
    scheduler = Scheduler(db, settings, GpuRegistry(db, inventory))
    yield scheduler
    for job_id in list(scheduler.books.running):
        scheduler.books.executor.signal(job_id, signal.SIGKILL)
    scheduler.books.executor.close()
