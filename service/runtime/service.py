"""`Service`: what an API process holds open, by feature. A route calls the part it needs
(`service.jobs`, `service.sweeps`, `service.gpus`); it never reaches into the scheduler or
builds a path. `roles` opens one for each kind of process."""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import Metric

from service.gpus.registry import GpuRegistry
from service.reservations.store import Bookings
from service.runtime.gpus import Gpus
from service.runtime.jobs import Jobs
from service.runtime.sweeps import Sweeps
from service.scheduler.dry_runs import DryRuns
from service.settings import Settings
from service.store.db import Database


class SchedulerHandle(Protocol):
    """The scheduler as an API process sees it: in a thread of this process
    (`scheduler.loop.Scheduler`) or in a process of its own (`scheduler.remote`)."""

    def wake(self) -> None: ...

    def alive(self) -> bool: ...

    def stop(self) -> None: ...

    def metrics(self) -> Iterator[Metric]: ...


@dataclass
class Service:
    settings: Settings
    db: Database
    registry: GpuRegistry  #: the GPUs as gpuq knows them
    jobs: Jobs
    sweeps: Sweeps
    gpus: Gpus
    reservations: Bookings
    dry_runs: DryRuns  #: where a job would start, and what runs, as the database says
    #: None in an API-only process: jobs are stored for a scheduler elsewhere
    scheduler: SchedulerHandle | None
    #: stops what the scheduler's side started beside it here (the webhook notifier)
    also_stop: Callable[[], None] = lambda: None

    def close(self) -> None:
        self.jobs.close()  # first: what is waiting is stored and answered
        self.also_stop()
        if self.scheduler is not None:
            self.scheduler.stop()
        self.db.dispose()

    def running_jobs(self) -> int:
        return self.dry_runs.running_jobs()
