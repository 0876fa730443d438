"""`/healthz`: liveness, including the scheduler thread."""

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from service.api.deps import ServiceDep

router = APIRouter(tags=["health"])


@router.get(
    "/healthz",
    responses={
        200: {"description": "Alive.", "content": {"application/json": {}}},
        503: {
            "description": "The scheduler thread has stopped.",
            "content": {"application/json": {}},
        },
    },
)
def healthz(service: ServiceDep) -> JSONResponse:
    """200 while the API and (unless this process is API-only) the scheduler are alive."""
    scheduler = service.scheduler
    alive = scheduler.alive() or not service.schedules
    body = {
        "status": "ok" if alive else "scheduler stopped",
        "scheduler": "running" if service.schedules else "elsewhere (API-only process)",
        "gpus": len(service.board.inventory.devices),
        "simulated_gpus": service.board.inventory.simulated,
        "running_jobs": len(scheduler.watches),
    }
    return JSONResponse(body, status_code=200 if alive else 503)
