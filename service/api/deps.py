"""Request dependencies shared by the routes."""

from typing import Annotated

from fastapi import Depends, Header, Path, Request

from service.errors import Forbidden
from service.runtime import Service
from service.users import Caller, authenticate


def get_service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


ServiceDep = Annotated[Service, Depends(get_service)]


def get_caller(
    service: ServiceDep,
    authorization: Annotated[
        str | None, Header(description="`Bearer <token>`; not needed while no user exists.")
    ] = None,
) -> Caller:
    return authenticate(service.db, authorization)


CallerDep = Annotated[Caller, Depends(get_caller)]


def get_admin(caller: CallerDep) -> Caller:
    if not caller.admin:
        raise Forbidden(f"{caller.name} is not an admin")
    return caller


AdminDep = Annotated[Caller, Depends(get_admin)]
JobId = Annotated[int, Path(ge=1, le=2**53, description="The job's id.")]
