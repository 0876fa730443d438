"""A reservation as the API shows it (`ReservationPublic`)."""

from datetime import datetime
from typing import Literal

from pydantic import BaseModel

from service.store.reservation_tables import Reservation
from service.usage.public import described

State = Literal["upcoming", "active", "ended", "released"]


class ReservationPublic(BaseModel):
    id: int = described("Its id.")
    name: str = described("What jobs name it by (`spec.reservation`, `--reservation`).")
    owner: str = described("Who booked it: its idle GPU-hours count against them.")
    users: list[str] = described("Who may use it.")
    group: str | None = described("A Unix group whose members may use it too.")
    gpus: int = described("How many GPUs it holds.")
    gpu_indices: list[int] = described(
        "Which GPUs, by index; empty on a Slurm cluster, where Slurm picks whole nodes."
    )
    named: bool = described("Whether the GPUs were named by whoever booked it.")
    cpus: float | None = described("Cores of the box others leave free in its window.")
    host_memory_mb: int | None = described("Host memory others leave free in its window.")
    starts_at: datetime = described("When it opens (UTC).")
    ends_at: datetime = described("When it ends (UTC).")
    state: State = described(
        "`upcoming`, `active` (its window is open), `ended`, or `released` (deleted, or "
        "given back for want of use, before its end)."
    )
    released_at: datetime | None = described("When it was deleted or released; null if not.")
    released_why: str | None = described("Why: `deleted by ana`, or its users left it idle.")
    created_at: datetime = described("When it was booked.")
    slurm_reservation: str | None = described(
        "The Slurm reservation it is (`scontrol show reservation NAME`); null on a box."
    )


def state_of(row: Reservation, now: datetime) -> State:
    if row.released_at is not None:
        return "released"
    if row.ends_at <= now:
        return "ended"
    return "active" if row.starts_at <= now else "upcoming"


def public_view(row: Reservation, now: datetime) -> ReservationPublic:
    assert row.id is not None
    return ReservationPublic(
        id=row.id,
        name=row.name,
        owner=row.owner,
        users=list(row.users),
        group=row.group,
        gpus=len(row.gpu_indices),
        gpu_indices=[] if row.slurm_name else list(row.gpu_indices),
        named=row.named,
        cpus=row.cpus,
        host_memory_mb=row.host_memory_mb,
        starts_at=row.starts_at,
        ends_at=row.ends_at,
        state=state_of(row, now),
        released_at=row.released_at,
        released_why=row.released_why,
        created_at=row.created_at,
        slurm_reservation=row.slurm_name,
    )
