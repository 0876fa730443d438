"""Request dependencies shared by the routes."""

from typing import Annotated

from fastapi import Depends, Path, Request

from service.runtime import Service

#: Who is asking. Until user tokens exist, every caller is the same anonymous user.
ANONYMOUS = "anonymous"


def get_service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


ServiceDep = Annotated[Service, Depends(get_service)]
JobId = Annotated[int, Path(ge=1, le=2**53, description="The job's id.")]
