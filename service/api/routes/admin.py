"""`/v1/admin`: maintenance drains of the whole box or single GPUs, and resuming."""

from typing import Annotated

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from service.api.deps import AdminDep, CallerDep, ServiceDep
from service.api.errors import documented
from service.public import DrainPublic

router = APIRouter(
    prefix="/v1/admin", tags=["admin"], responses=documented(400, 401, 403, 404, 409, 413)
)

GpuIndexes = Annotated[
    list[Annotated[int, Field(ge=0, le=1023)]] | None,
    Field(
        min_length=1, max_length=1024, description="GPU indices, as listed; null: the whole box."
    ),
]


class DrainRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    gpus: GpuIndexes = None
    reason: str | None = Field(
        None, min_length=1, max_length=500, description="Why, for the users whose jobs wait."
    )


class ResumeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    gpus: GpuIndexes = None


@router.get("/drain")
def list_drains(service: ServiceDep, caller: CallerDep) -> list[DrainPublic]:
    """What is drained: the whole box (`gpu` null) or single GPUs."""
    return service.gpus.drains()


@router.post("/drain")
def drain(body: DrainRequest, service: ServiceDep, admin: AdminDep) -> list[DrainPublic]:
    """Starts nothing new on `gpus` (null: the whole box) until resumed; running jobs
    finish, queued ones say why they wait. Draining again changes the reason. Admins; 404
    for an unknown GPU; 409 for single GPUs under Slurm (drain a node there)."""
    return service.gpus.drain(body.gpus, body.reason, admin)


@router.post("/resume")
def resume(body: ResumeRequest, service: ServiceDep, admin: AdminDep) -> list[DrainPublic]:
    """Ends the drains of `gpus` (null: every drain, the whole box's too); returns those
    left. Admins."""
    return service.gpus.resume(body.gpus, admin)
