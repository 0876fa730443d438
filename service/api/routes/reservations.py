"""`/v1/reservations`: GPUs booked ahead for a list of users or a group, for a window;
the scheduler places jobs around them (docs/team/reservations.md)."""

from typing import Annotated

from fastapi import APIRouter, Path, Query

from service.api.deps import CallerDep, ServiceDep
from service.api.errors import documented
from service.reservations.public import ReservationPublic
from service.reservations.requests import ReservationBody, ReservationChange

router = APIRouter(
    prefix="/v1/reservations",
    tags=["reservations"],
    responses=documented(400, 401, 403, 404, 409, 413),
)

Key = Annotated[
    str,
    Path(
        min_length=1,
        max_length=64,
        pattern=r"^[a-z0-9][a-z0-9._-]*$",
        description="Its id, or its name (the one not over, else the latest).",
    ),
]


@router.post("", status_code=201)
def book(body: ReservationBody, service: ServiceDep, caller: CallerDep) -> ReservationPublic:
    """Books GPUs (`gpus`: how many, gpuq picks; or `gpu_ids`) for a window and its users.
    403 past GPUQ_MAX_RESERVED_GPU_HOURS (admins have no limit); 409 naming the
    reservation it would clash with, or Slurm's refusal on a cluster."""
    return service.reservations.book(body, caller)


@router.get("")
def reservations(
    service: ServiceDep,
    caller: CallerDep,
    everything: Annotated[
        bool, Query(alias="all", description="Ended and released ones too.")
    ] = False,
) -> list[ReservationPublic]:
    """The reservations not over (upcoming or open), by start; every member sees every
    one, since they shape everyone's waits."""
    return service.reservations.listed(everything)


@router.get("/{key}")
def reservation(key: Key, service: ServiceDep, caller: CallerDep) -> ReservationPublic:
    """One reservation, by id or by name; 404 if there is none."""
    return service.reservations.shown(key)


@router.patch("/{key}")
def change(
    key: Key, body: ReservationChange, service: ServiceDep, caller: CallerDep
) -> ReservationPublic:
    """Moves its window or changes its users; its owner or an admin. The same checks as a
    booking; 409 if it is over."""
    return service.reservations.change(key, body, caller)


@router.delete("/{key}")
def delete(key: Key, service: ServiceDep, caller: CallerDep) -> ReservationPublic:
    """Ends it now (its GPUs return to everyone; its row stays, for usage); its owner or
    an admin. 409 if it is over."""
    return service.reservations.delete(key, caller)
