"""`/v1/audit`: every mutation, for admins."""

from typing import Annotated

from fastapi import APIRouter, Query

from service.api.deps import AdminDep, ServiceDep
from service.api.errors import documented
from service.public import AuditPage, AuditPublic
from service.team import audit

router = APIRouter(prefix="/v1/audit", tags=["audit"], responses=documented(401, 403))


@router.get("")
def list_audit(
    service: ServiceDep,
    admin: AdminDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=32, description="From `next_cursor`.")] = None,
) -> AuditPage:
    """Who submitted, cancelled, held, released or re-prioritised what, newest first."""
    rows, next_cursor = audit.entries(service.db, limit=limit, cursor=cursor)
    return AuditPage(
        entries=[AuditPublic.model_validate(r.model_dump()) for r in rows], next_cursor=next_cursor
    )
