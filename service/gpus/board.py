"""The GPUs as gpuq sees them: stored identity, allocations, live memory, foreign use."""

import logging
from collections.abc import Iterable

from sqlalchemy import update
from sqlmodel import Session, col, select

from service.audit import record
from service.db import Database
from service.gpus.inventory import Inventory
from service.gpus.nvml import DeviceReading
from service.models import Allocation, AllocationPublic, ForeignProcess, Gpu, GpuPublic
from service.scheduler.memory import process_group
from service.scheduler.placement import GpuSlot, Held

log = logging.getLogger(__name__)

#: A GPU's hold fields when nothing holds it back.
UNHELD: dict[str, object] = {
    "hold": None,
    "hold_reason": None,
    "hold_job_id": None,
    "hold_pids": [],
    "hold_since": None,
}


def sync(db: Database, inventory: Inventory) -> None:
    """Stores the discovered GPUs by index (their identity outlives a restart)."""
    present = {d.index for d in inventory.devices}
    with db.write() as session:
        for gone in session.exec(select(Gpu).where(col(Gpu.index).not_in(present))).all():
            if session.exec(select(Allocation).where(Allocation.gpu_index == gone.index)).first():
                log.warning("GPU %d is gone from the inventory but still allocated", gone.index)
            else:
                session.delete(gone)
        for d in inventory.devices:
            row = session.get(Gpu, d.index) or Gpu(
                index=d.index, uuid=d.uuid, name=d.name, memory_total_mb=d.memory_total_mb
            )
            row.uuid, row.name = d.uuid, d.name
            row.memory_total_mb, row.simulated = d.memory_total_mb, inventory.simulated
            session.add(row)


def foreign_processes(reading: DeviceReading, job_groups: set[int]) -> list[ForeignProcess]:
    """Processes on a GPU outside every gpuq job's process group."""
    return [
        ForeignProcess(pid=p.pid, memory_mb=p.memory_mb)
        for p in reading.processes
        if process_group(p.pid) not in job_groups
    ]


class Board:
    """Reads GPUs and allocations together; the live part comes from NVML when real."""

    def __init__(self, db: Database, inventory: Inventory) -> None:
        self.db = db
        self.inventory = inventory

    def readings(self) -> dict[int, DeviceReading]:
        if self.inventory.probe is None:
            return {}
        return {r.index: r for r in self.inventory.probe.read()}

    def load(self, session: Session) -> tuple[list[Gpu], list[Allocation]]:
        present = [d.index for d in self.inventory.devices]
        query = select(Gpu).where(col(Gpu.index).in_(present)).order_by(col(Gpu.index))
        gpus = list(session.exec(query).all())
        return gpus, list(session.exec(select(Allocation)).all())

    def slots(self, session: Session, job_groups: set[int]) -> tuple[list[GpuSlot], list[Held]]:
        """What placement needs: each GPU with its foreign memory, and every hold on them."""
        gpus, allocations = self.load(session)
        readings = self.readings()
        slots = []
        for gpu in gpus:
            reading = readings.get(gpu.index)
            foreign = (
                0
                if reading is None
                else sum(p.memory_mb for p in foreign_processes(reading, job_groups))
            )
            unavailable = None
            if gpu.hold == "draining":
                unavailable = f"draining after job {gpu.hold_job_id}"
            elif gpu.hold == "quarantined":
                unavailable = f"quarantined ({gpu.hold_reason})"
            slots.append(GpuSlot(gpu.index, gpu.memory_total_mb, foreign, unavailable))
        held = [Held(a.job_id, a.gpu_index, a.memory_mb) for a in allocations]
        return slots, held

    def release(self, index: int, actor: str) -> bool:
        """Clears a draining or quarantined hold; False if the GPU was not held."""
        with self.db.write() as session:
            gpu = session.get(Gpu, index)
            was = gpu.hold_reason if gpu else None
            result = session.execute(
                update(Gpu)
                .where(col(Gpu.index) == index, col(Gpu.hold).is_not(None))
                .values(**UNHELD)
            )
            released = result.rowcount == 1  # type: ignore[attr-defined]
            if released:
                record(session, actor, "gpu_release", f"gpu/{index}", was=was)
        if released:
            log.info("GPU %d: released by %s", index, actor)
        return released

    def describe(self, job_groups: Iterable[int]) -> list[GpuPublic]:
        """The `GET /v1/gpus` view."""
        with self.db.read() as session:
            gpus, allocations = self.load(session)
        readings = self.readings()
        groups = set(job_groups)
        views = []
        for gpu in gpus:
            mine = [a for a in allocations if a.gpu_index == gpu.index]
            reading = readings.get(gpu.index)
            if reading is not None:
                used = reading.memory_used_mb
                foreign = foreign_processes(reading, groups)
            else:  # simulated: what the jobs on it declared
                used = sum(
                    gpu.memory_total_mb if a.memory_mb is None else a.memory_mb for a in mine
                )
                foreign = []
            used = min(used, gpu.memory_total_mb)
            views.append(
                GpuPublic(
                    index=gpu.index,
                    uuid=gpu.uuid,
                    name=gpu.name,
                    memory_total_mb=gpu.memory_total_mb,
                    memory_used_mb=used,
                    memory_free_mb=gpu.memory_total_mb - used,
                    state=gpu.hold or ("in_use" if mine else "free"),
                    state_reason=gpu.hold_reason,
                    utilization_pct=reading.utilization_pct if reading else None,
                    simulated=gpu.simulated,
                    allocations=[
                        AllocationPublic(job_id=a.job_id, memory_mb=a.memory_mb) for a in mine
                    ],
                    foreign_processes=foreign,
                )
            )
        return views
