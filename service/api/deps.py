"""Request dependencies shared by the routes."""

from typing import Annotated

from fastapi import Depends, Header, Path
from starlette.requests import HTTPConnection

from service.api import open_mode
from service.api.local_socket import PEER_UID
from service.errors import Forbidden
from service.runtime import Service
from service.team.users import OPEN, Caller, authenticate, authenticate_peer


# Async on purpose: FastAPI runs a plain `def` dependency in its thread pool, a hop that
# costs more than these do.
# `HTTPConnection`: a request or a WebSocket (`/v1/jobs/{id}/terminal`).
async def get_service(request: HTTPConnection) -> Service:
    service: Service = request.app.state.service
    return service


ServiceDep = Annotated[Service, Depends(get_service)]


async def get_caller(
    request: HTTPConnection,
    service: ServiceDep,
    authorization: Annotated[
        str | None,
        Header(
            description="`Bearer <token>`; not needed while no user exists, nor on the local "
            "socket."
        ),
    ] = None,
) -> Caller:
    # Runs on the event loop: the users are cached, and reading them after a change is
    # one local SQLite query.
    uid = request.scope.get(PEER_UID)
    if uid is not None and not authorization:
        return authenticate_peer(service.db, uid)
    caller = authenticate(service.db, authorization)
    if caller is OPEN:  # no user exists (now: the last one may have been revoked)
        open_mode.admit(request, service.settings)
    return caller


CallerDep = Annotated[Caller, Depends(get_caller)]


async def get_admin(caller: CallerDep) -> Caller:
    if not caller.admin:
        raise Forbidden(f"{caller.name} is not an admin")
    return caller


AdminDep = Annotated[Caller, Depends(get_admin)]
JobId = Annotated[int, Path(ge=1, le=2**53, description="The job's id.")]
SweepId = Annotated[int, Path(ge=1, le=2**53, description="The sweep's id.")]
