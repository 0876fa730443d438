"""The GPUs as gpuq sees them: stored identity and state, allocations, live memory,
foreign use; and the one gate for a GPU's state (`change_state`)."""

import logging
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import Row, Table, bindparam, update
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from gpuq.contract.processes import process_session
from service.gpus import maintenance
from service.gpus.inventory import Inventory
from service.gpus.nvml import DeviceReading
from service.gpus.states import ALLOWED_FROM, GpuState
from service.public import AllocationPublic, ForeignProcess, GpuPublic, MaintenancePublic
from service.store.db import Database, utcnow
from service.store.tables import Allocation, Gpu
from service.team.audit import record

log = logging.getLogger(__name__)

GPU: Table = Gpu.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class StoredGpu:
    """What planning and `GET /v1/gpus` read of a stored GPU."""

    index: int
    uuid: str
    name: str
    memory_total_mb: int
    simulated: bool
    state: GpuState
    state_reason: str | None
    drain_job_id: int | None


_PRESENT = (
    sa_select(*(GPU.c[f.name] for f in fields(StoredGpu)))
    .where(GPU.c.index.in_(bindparam("present", expanding=True)))
    .order_by(GPU.c.index)
)
_ALLOCATIONS = sa_select(Allocation.__table__)  # type: ignore[attr-defined]

#: What a free GPU keeps of its last drain: nothing.
_FREE: dict[str, Any] = {"state_reason": None, "drain_job_id": None, "drain_pids": []}


def change_state(session: Session, index: int, to: GpuState, **values: Any) -> bool:
    """Moves GPU `index` to `to` if its stored state allows it; False otherwise.

    As for jobs, the WHERE clause is the state machine: `in_use` is never stored, and a
    transition the table does not list matches no row.
    """
    if to == GpuState.free:
        values = {**_FREE, **values}
    statement = (
        update(Gpu)
        .where(col(Gpu.index) == index, col(Gpu.state).in_(ALLOWED_FROM[to]))
        .values(state=to, state_since=utcnow(), **values)
    )
    return session.execute(statement).rowcount == 1  # type: ignore[attr-defined]


def unavailable(gpu: StoredGpu) -> str | None:
    """Why nothing may be placed on `gpu` now, or None."""
    if gpu.state == GpuState.draining:
        return f"draining after job {gpu.drain_job_id}"
    if gpu.state == GpuState.quarantined:
        return f"quarantined ({gpu.state_reason})"
    return None


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


def foreign_processes(reading: DeviceReading, job_sessions: set[int]) -> list[ForeignProcess]:
    """Processes on a GPU outside every gpuq job's session."""
    return [
        ForeignProcess(pid=p.pid, memory_mb=p.memory_mb)
        for p in reading.processes
        if process_session(p.pid) not in job_sessions
    ]


class GpuRegistry:
    """Reads GPUs and allocations together; the live part comes from NVML when real."""

    def __init__(self, db: Database, inventory: Inventory) -> None:
        self.db = db
        self.inventory = inventory

    def readings(self) -> dict[int, DeviceReading]:
        if self.inventory.probe is None:
            return {}
        return {r.index: r for r in self.inventory.probe.read()}

    def load(self, session: Session) -> tuple[list[StoredGpu], list[Row[Any]]]:
        """The present GPUs and every allocation (`job_id`, `gpu_index`, `memory_mb`), read
        with Core: every scheduler step reads them, and the ORM's objects cost four times
        as much."""
        connection = session.connection()
        present = [d.index for d in self.inventory.devices]
        gpus = [StoredGpu(*row) for row in connection.execute(_PRESENT, {"present": present})]
        return gpus, list(connection.execute(_ALLOCATIONS).all())

    def foreign_mb(self, job_sessions: set[int]) -> dict[int, int]:
        """Memory held on each GPU by processes outside every gpuq job (live GPUs only)."""
        return {
            index: sum(p.memory_mb for p in foreign_processes(reading, job_sessions))
            for index, reading in self.readings().items()
        }

    def release(self, index: int, actor: str) -> bool:
        """Frees a draining or quarantined GPU; False if it was neither."""
        with self.db.write() as session:
            gpu = session.get(Gpu, index)
            was = gpu.state_reason if gpu else None
            released = change_state(session, index, GpuState.free)
            if released:
                record(session, actor, "gpu_release", f"gpu/{index}", was=was)
        if released:
            log.info("GPU %d: released by %s", index, actor)
        return released

    def describe(self, job_sessions: Iterable[int]) -> list[GpuPublic]:
        """The `GET /v1/gpus` view."""
        with self.db.read() as session:
            gpus, allocations = self.load(session)
            drains = {d.gpu: d for d in maintenance.drains(session)}
        readings = self.readings()
        groups = set(job_sessions)
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
            drain = drains.get(gpu.index) or drains.get(None)
            views.append(
                GpuPublic(
                    index=gpu.index,
                    uuid=gpu.uuid,
                    name=gpu.name,
                    memory_total_mb=gpu.memory_total_mb,
                    memory_used_mb=used,
                    memory_free_mb=gpu.memory_total_mb - used,
                    state=GpuState.in_use if gpu.state == GpuState.free and mine else gpu.state,
                    state_reason=gpu.state_reason,
                    utilization_pct=reading.utilization_pct if reading else None,
                    simulated=gpu.simulated,
                    allocations=[
                        AllocationPublic(job_id=a.job_id, memory_mb=a.memory_mb) for a in mine
                    ],
                    foreign_processes=foreign,
                    maintenance=MaintenancePublic(**drain.model_dump(exclude={"gpu"}))
                    if drain
                    else None,
                )
            )
        return views
