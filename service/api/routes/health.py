"""`/healthz`: liveness, including the scheduler's; `/metrics` for Prometheus."""

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from service import prometheus
from service.api.deps import CallerDep, ServiceDep
from service.api.errors import documented

router = APIRouter(tags=["health"])


@router.get(
    "/healthz",
    responses={
        200: {"description": "Alive.", "content": {"application/json": {}}},
        503: {
            "description": "The scheduler has stopped.",
            "content": {"application/json": {}},
        },
    },
)
def healthz(service: ServiceDep) -> JSONResponse:
    """200 while the API and (unless this process is API-only) the scheduler are alive."""
    scheduler = service.scheduler
    alive = scheduler is None or scheduler.alive()
    body = {
        "status": "ok" if alive else "scheduler stopped",
        "scheduler": "running" if scheduler is not None else "elsewhere (API-only process)",
        "gpus": len(service.registry.inventory.devices),
        "simulated_gpus": service.registry.inventory.simulated,
        "running_jobs": service.running_jobs(),
    }
    return JSONResponse(body, status_code=200 if alive else 503)


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"description": "Prometheus text format.", "content": {"text/plain": {}}},
        **documented(401),
    },
)
def metrics(service: ServiceDep, caller: CallerDep) -> Response:
    """Jobs by state, GPU memory per GPU, active jobs' peaks and progress, and (from the
    scheduling process) the scheduler's step time and queue waits."""
    return Response(prometheus.render(service), media_type=CONTENT_TYPE_LATEST)
