"""`/v1/me`: who the API takes the caller for, and whether they are an admin (`gpuq mcp`
lists admin tools only to admins)."""

from fastapi import APIRouter
from pydantic import BaseModel

from service.api.deps import CallerDep
from service.api.errors import documented
from service.usage.public import described

router = APIRouter(prefix="/v1/me", tags=["users"], responses=documented(401))


class MePublic(BaseModel):
    name: str = described("Your gpuq user name (`anonymous` while no user exists).")
    admin: bool = described("Whether you may act on everyone's jobs and the box itself.")
    unix_user: str | None = described("The Unix account your jobs run as; null: not bound.")


@router.get("")
def who_am_i(caller: CallerDep) -> MePublic:
    """You, as the API knows you: from your token, or your Unix account on the socket."""
    return MePublic(name=caller.name, admin=caller.admin, unix_user=caller.unix_user)
