"""One factory per kind of process, each building what that process uses and nothing else:

- `open_api`: an API-only process (`gpuq serve --api-only`): jobs are stored for a
  scheduler elsewhere; no scheduler, no executor.
- `open_with_scheduler_process`: `gpuq serve`: the API here, the scheduler in a process of
  its own (`scheduler.remote`).
- `open_scheduler`: that process (`service.scheduler_process`): the scheduler, its
  executor, the webhook notifier and the snapshot collector; no API.
- `open_with_scheduler`: both in this process, the scheduler in a thread (tests, and
  `create_app` given no service).

Every API process answers dry runs (`scheduler.dry_runs`) from the database, whichever
role it has. Each raises on trouble: `InventoryError` (no GPU, or Slurm not answering),
`RunAsError`, `SchedulerLocked`, `SchedulerFailed`; each says why.
"""

from collections.abc import Callable
from dataclasses import dataclass

from service.executors import Cluster
from service.executors.slurm.reservations import SlurmBookings
from service.gpus import registry
from service.gpus.inventory import Inventory, discover
from service.gpus.nvml import GpuProbe
from service.gpus.registry import GpuRegistry
from service.host import host_size
from service.reservations.store import Bookings
from service.runtime.checks import SubmitChecks
from service.runtime.executor_choice import open_cluster, open_executor
from service.runtime.gpus import Gpus
from service.runtime.jobs import Jobs
from service.runtime.service import SchedulerHandle, Service
from service.runtime.sweeps import Sweeps
from service.scheduler.dry_runs import DryRuns
from service.scheduler.loop import Scheduler
from service.scheduler.remote import SchedulerFailed, SchedulerProcess
from service.settings import Settings
from service.snapshots import SnapshotCollector
from service.store import migrate
from service.store.db import Database
from service.team import run_as, state_dirs
from service.webhooks import Notifier


@dataclass
class _Store:
    """The database, migrated, and the GPUs as gpuq knows them."""

    settings: Settings
    db: Database
    registry: GpuRegistry


@dataclass
class Scheduling:
    """The scheduler's half of gpuq: the scheduler (its executor inside), webhooks, and
    the removal of unused snapshots."""

    db: Database
    scheduler: Scheduler
    notifier: Notifier
    collector: SnapshotCollector

    def stop_beside(self) -> None:
        """Stops what runs beside the scheduler: the notifier and the collector."""
        self.notifier.stop()
        self.collector.stop()

    def close(self) -> None:
        self.stop_beside()
        self.scheduler.stop()
        self.db.dispose()


def open_api(settings: Settings, *, probe: GpuProbe | None = None) -> Service:
    """An API-only process's service; submitted jobs stay queued until a scheduler (in
    another process, perhaps on another host) starts them. `probe`: see `open_with_scheduler`."""
    cluster = open_cluster(settings)
    store = _open_store(settings, lambda: _inventory(settings, cluster, probe), api_only=True)
    return _service(store, cluster, None)


def open_with_scheduler_process(settings: Settings) -> Service:
    """`gpuq serve`'s: the API here, and the scheduler in a process of its own, started and
    ready (`SchedulerFailed` if it cannot start: another scheduler holds the lock)."""
    cluster = open_cluster(settings)
    store = _open_store(settings, lambda: _inventory(settings, cluster, None), api_only=False)
    scheduler = SchedulerProcess(store.db)
    try:
        scheduler.start(settings)
    except SchedulerFailed:
        store.db.dispose()
        raise
    return _service(store, cluster, scheduler)


def open_with_scheduler(settings: Settings, *, probe: GpuProbe | None = None) -> Service:
    """The API and the scheduler (in a thread) in this process. `probe` replaces NVML with
    a stand-in (tests): its readings drive placement, sampling and draining while workers
    train on simulated devices."""
    scheduling = open_scheduler(settings, probe=probe)
    cluster = open_cluster(settings)
    registry = scheduling.scheduler.books.gpus
    store = _Store(settings, scheduling.db, registry)
    return _service(store, cluster, scheduling.scheduler, also_stop=scheduling.stop_beside)


def open_scheduler(settings: Settings, *, probe: GpuProbe | None = None) -> Scheduling:
    """The scheduler's process's half: migrates, reconciles, starts the scheduler, the
    webhook notifier and the snapshot collector; `SchedulerLocked` if another scheduler
    runs on this database."""
    executor = open_executor(settings)
    queue = executor.own_queue()
    store = _open_store(settings, lambda: _inventory(settings, queue, probe), api_only=False)
    scheduler = Scheduler(store.db, settings, store.registry, executor)
    try:
        scheduler.start()
    except BaseException:
        store.db.dispose()
        raise
    notifier = Notifier(store.db, settings)
    notifier.start()
    collector = SnapshotCollector(store.db, settings)
    collector.start()
    store.db.wake_on_api_commits(scheduler.wake)  # what --api-only processes store starts now
    return Scheduling(store.db, scheduler, notifier, collector)


def _inventory(settings: Settings, cluster: Cluster | None, probe: GpuProbe | None) -> Inventory:
    """This box's GPUs; none of its own where a cluster runs the jobs (`sim:` still makes
    workers simulate theirs)."""
    if cluster is not None:
        return Inventory([], simulated=settings.gpus.startswith("sim"), probe=None)
    if probe is not None:
        return Inventory.from_probe(probe, simulated=True)
    return discover(settings.gpus)


def _open_store(
    settings: Settings, inventory_of: Callable[[], Inventory], *, api_only: bool
) -> _Store:
    """Checks who jobs run as, prepares the state directory, finds the GPUs, opens and
    migrates the database and records the GPUs in it."""
    run_as.check_startup(settings)
    state_dirs.prepare(settings)
    inventory = inventory_of()
    db = Database.open(settings.db_url, api_only=api_only)
    migrate.upgrade(db)
    try:
        run_as.check_members(settings, db)
    except run_as.RunAsError:
        db.dispose()
        raise
    state_dirs.protect_database(settings)
    registry.sync(db, inventory)
    return _Store(settings, db, GpuRegistry(db, inventory))


def _service(
    store: _Store,
    cluster: Cluster | None,
    scheduler: SchedulerHandle | None,
    also_stop: Callable[[], None] | None = None,
) -> Service:
    settings, db = store.settings, store.db
    wake = scheduler.wake if scheduler is not None else _nobody
    checks = SubmitChecks(settings, db, store.registry.inventory, cluster)
    dry_runs = DryRuns(db, settings, store.registry, checks.share_defaults)
    return Service(
        settings=settings,
        db=db,
        registry=store.registry,
        jobs=Jobs(settings, db, checks, dry_runs, wake),
        sweeps=Sweeps(settings, db, checks, wake),
        gpus=Gpus(db, store.registry, cluster, dry_runs, wake, host_size(settings)),
        reservations=_bookings(settings, db, store.registry, cluster, wake),
        dry_runs=dry_runs,
        scheduler=scheduler,
        also_stop=also_stop or _nobody,
    )


def _bookings(
    settings: Settings,
    db: Database,
    registry: GpuRegistry,
    cluster: Cluster | None,
    wake: Callable[[], None],
) -> Bookings:
    """Reservations of this box's GPUs, or (under Slurm) of the cluster's nodes."""
    gpus = [device.index for device in registry.inventory.devices]
    if cluster is None:
        return Bookings(db, settings, gpus, host_size(settings), None, wake)
    return Bookings(db, settings, gpus, None, SlurmBookings(settings, cluster), wake)


def _nobody() -> None:
    """Where no scheduler runs in this process: another one hears of commits itself (the
    database's change notices, `store.foreign_commits`)."""
