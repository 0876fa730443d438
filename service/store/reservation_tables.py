"""The reservation table: GPUs booked for a window, for a list of users or a Unix group.
Written only by `service.reservations`; the scheduler reads it at every plan."""

from datetime import datetime

from sqlalchemy import JSON, Column
from sqlmodel import Field, SQLModel

from gpuq.contract.spec import empty_list
from service.store.db import utc_field, utcnow


class Reservation(SQLModel, table=True):
    """GPUs `gpu_indices` (with their whole memory), and optionally `cpus` cores and
    `host_memory_mb` of the box, for `users` and the members of `group` from `starts_at`
    to `ends_at`. A reservation ended early (deleted, or released for want of use) keeps
    its row, with `released_at`: usage counts its idle hours up to then."""

    __tablename__ = "reservation"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True)  #: unique among the reservations not yet over
    owner: str = Field(index=True)  #: who booked it: its idle GPU-hours count against them
    users: list[str] = Field(default_factory=empty_list, sa_column=Column(JSON, nullable=False))
    group: str | None = None  #: a Unix group whose members may use it too
    gpu_indices: list[int] = Field(
        default_factory=empty_list, sa_column=Column(JSON, nullable=False)
    )
    named: bool = False  #: the GPUs were named by whoever booked it, not chosen by gpuq
    cpus: float | None = None
    host_memory_mb: int | None = None
    starts_at: datetime = utc_field()
    ends_at: datetime = utc_field(index=True)
    created_at: datetime = utc_field(default_factory=utcnow)
    #: stamped at every change: the scheduler plans again when it moves
    updated_at: datetime = utc_field(default_factory=utcnow)
    released_at: datetime | None = utc_field(default=None)
    released_why: str | None = None  #: "deleted by ana", "idle: ..."
    #: the Slurm reservation it was mapped onto (`scontrol create reservation`), if any
    slurm_name: str | None = None
