"""Builds the FastAPI application around a running `Service`."""

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from service.api import errors
from service.api.limits import BodySizeLimit
from service.api.routes import (
    admin,
    artifacts,
    audit,
    dashboard,
    events,
    gpus,
    health,
    host,
    jobs,
    me,
    reservations,
    snapshots,
    sweeps,
    terminal,
    usage,
    webhooks,
)
from service.runtime import Service, open_with_scheduler
from service.settings import Settings

log = logging.getLogger(__name__)

DESCRIPTION = """Queue TensorFlow training jobs on this workstation's GPUs.

Submit a job spec to `POST /v1/jobs`, poll `GET /v1/jobs/{id}`, read `GET /v1/jobs/{id}/logs`.
Memory is in MiB everywhere; errors are `{"detail": ...}` with a 4xx status."""


def create_app(settings: Settings, service: Service | None = None) -> FastAPI:
    """The app; it opens (and later closes) a `Service` unless one is given."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = service is None
        app.state.service = open_with_scheduler(settings) if owned else service
        try:
            yield
        finally:
            if owned:
                app.state.service.close()

    app = FastAPI(title="gpuq", version="0.1.0", description=DESCRIPTION, lifespan=lifespan)
    errors.install(app)
    routers = (
        jobs,
        sweeps,
        terminal,
        artifacts,
        events,
        gpus,
        host,
        admin,
        audit,
        health,
        dashboard,
        usage,
        webhooks,
        snapshots,
        reservations,
        me,
    )
    for module in routers:
        app.include_router(module.router)
    # A snapshot's upload is streamed to disk by its route, which bounds it itself.
    app.add_middleware(BodySizeLimit, streamed={snapshots.router.prefix})
    return app
