"""Everything `gpuq serve` holds open: database, GPU inventory, scheduler."""

from dataclasses import dataclass

from service import migrate
from service.db import Database
from service.gpus import board as gpu_board
from service.gpus.board import Board
from service.gpus.inventory import Inventory, discover
from service.gpus.nvml import GpuProbe
from service.scheduler.loop import Scheduler
from service.settings import Settings


@dataclass
class Service:
    settings: Settings
    db: Database
    board: Board
    scheduler: Scheduler
    schedules: bool = True  #: False in an API-only process

    @classmethod
    def open(
        cls, settings: Settings, *, schedule: bool = True, probe: GpuProbe | None = None
    ) -> "Service":
        """Migrates the database, discovers GPUs and starts the scheduler; raises on trouble.

        `schedule=False` serves the API only: jobs are stored and stay queued. `probe`
        replaces NVML with a stand-in (tests): its readings drive placement, sampling and
        draining while workers train on simulated devices.
        """
        settings.home.mkdir(parents=True, exist_ok=True)
        if probe is None:
            inventory = discover(settings.gpus)
        else:
            inventory = Inventory.from_probe(probe, simulated=True)
        db = Database.open(settings.db_url)
        migrate.upgrade(db)
        gpu_board.sync(db, inventory)
        board = Board(db, inventory)
        scheduler = Scheduler(db, settings, board)
        if schedule:
            scheduler.start()
        return cls(settings, db, board, scheduler, schedules=schedule)

    def close(self) -> None:
        if self.schedules:
            self.scheduler.stop()
        self.db.dispose()
