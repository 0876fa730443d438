"""`/v1/usage`: GPU-hours per user, per day or per GPU over a period, what came of them, and
how long attempts waited."""

from typing import Annotated

from fastapi import APIRouter, Query

from service.api.deps import CallerDep, ServiceDep
from service.api.errors import documented
from service.store.db import utcnow
from service.usage.period import period
from service.usage.public import By, UsageReport
from service.usage.reads import usage_report

router = APIRouter(prefix="/v1/usage", tags=["usage"], responses=documented(401))

WHEN = (
    "An ISO 8601 time (`2026-11-25`, `2026-11-25T06:00Z`; without a zone, UTC), `now`, or a "
    "span back from now: `7d`, `24h`, `30m`, `1d12h`."
)


@router.get("")
def get_usage(
    service: ServiceDep,
    caller: CallerDep,
    since: Annotated[
        str | None, Query(max_length=64, description=f"{WHEN} Default: 7 days before `until`.")
    ] = None,
    until: Annotated[
        str | None, Query(max_length=64, description=f"{WHEN} Default (and at most): now.")
    ] = None,
    by: Annotated[
        By, Query(description="Rows per `owner`, per UTC `day`, or per `gpu`.")
    ] = "owner",
) -> UsageReport:
    """GPU-hours, jobs by final state, GPU-hours lost to failures and to preemptions, queue
    waits and each row's share of the box over the period. Admins see every row; a member
    sees the team's total and rows of their own work alone. 422 names `since` or `until`
    when it cannot be read, or when the period is empty."""
    now = utcnow()
    asked = period(since, until, now, by=by)
    rows_of = None if caller.admin else caller.name
    return usage_report(service.db, asked, by, rows_of=rows_of, now=now)
