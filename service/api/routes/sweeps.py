"""`/v1/sweeps`: submit a sweep, list sweeps, read one with its leaderboard and curves,
run its failed members again, cancel, hold and release the whole of it."""

from typing import Annotated

from fastapi import APIRouter, Header, Query, Response, status

from gpuq.contract.sweep import SweepSpec
from service.api.deps import CallerDep, ServiceDep, SweepId
from service.api.errors import documented
from service.jobs.privacy import curves_as_seen_by, sweep_as_seen_by
from service.public import SweepCurves, SweepPage, SweepPublic
from service.sweeps import reads, views

router = APIRouter(
    prefix="/v1/sweeps", tags=["sweeps"], responses=documented(400, 401, 403, 404, 409, 413, 429)
)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses={200: {"model": SweepPublic, "description": "A replayed `Idempotency-Key`."}},
)
def submit_sweep(
    spec: SweepSpec,
    service: ServiceDep,
    caller: CallerDep,
    response: Response,
    idempotency_key: Annotated[
        str | None,
        Header(min_length=1, max_length=200, description="Same key, same sweep: replays are safe."),
    ] = None,
) -> SweepPublic:
    """Queues every member of a sweep at once, or none: 422 names the field when a member
    could never run here, or when the sweep would make more members than GPUQ_MAX_SWEEP_JOBS."""
    sweep, created = service.sweeps.submit(spec, caller, idempotency_key)
    if not created:
        response.status_code = status.HTTP_200_OK
    return views.detail(service.db, sweep)


@router.get("")
def list_sweeps(
    service: ServiceDep,
    caller: CallerDep,
    owner: Annotated[str | None, Query(max_length=128)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=32, description="From `next_cursor`.")] = None,
) -> SweepPage:
    """Sweeps, newest first, with their members counted by state."""
    page, next_cursor = reads.list_sweeps(service.db, owner=owner, limit=limit, cursor=cursor)
    shown = [
        sweep_as_seen_by(caller, s, service.settings) for s in views.summaries(service.db, page)
    ]
    return SweepPage(sweeps=shown, next_cursor=next_cursor)


@router.get("/{sweep_id}")
def get_sweep(sweep_id: SweepId, service: ServiceDep, caller: CallerDep) -> SweepPublic:
    """One sweep and its leaderboard: members ranked by the best value of the metric, the
    best on top with its parameters."""
    sweep = views.detail(service.db, reads.get_sweep(service.db, sweep_id))
    return sweep_as_seen_by(caller, sweep, service.settings)


@router.get("/{sweep_id}/metrics")
def sweep_metrics(sweep_id: SweepId, service: ServiceDep, caller: CallerDep) -> SweepCurves:
    """Every member's metric per epoch: the curves the dashboard overlays."""
    sweep = reads.get_sweep(service.db, sweep_id)
    return curves_as_seen_by(caller, sweep.owner, views.curves(service.db, sweep), service.settings)


@router.post("/{sweep_id}/rerun", status_code=status.HTTP_201_CREATED)
def rerun_sweep(sweep_id: SweepId, service: ServiceDep, caller: CallerDep) -> SweepPublic:
    """Runs again each point of the sweep whose latest member failed or was stopped early:
    a new member with the same spec (the same snapshot: the same code) and parameters, in
    this sweep. Owner or admin; 409 if there is none."""
    sweep, _ = service.sweeps.rerun(sweep_id, caller)
    return views.detail(service.db, sweep)


@router.post("/{sweep_id}/cancel", status_code=status.HTTP_202_ACCEPTED)
def cancel_sweep(sweep_id: SweepId, service: ServiceDep, caller: CallerDep) -> SweepPublic:
    """Cancels the queued members at once and stops the running ones (SIGTERM, then SIGKILL
    after the grace period). Owner or admin; 409 if every member already ended."""
    return views.detail(service.db, service.sweeps.cancel(sweep_id, caller))


@router.post("/{sweep_id}/hold")
def hold_sweep(sweep_id: SweepId, service: ServiceDep, caller: CallerDep) -> SweepPublic:
    """Keeps the queued members from starting until the sweep is released; running ones go
    on. Owner or admin; 409 if no member is queued."""
    return views.detail(service.db, service.sweeps.hold(sweep_id, caller, held=True))


@router.post("/{sweep_id}/release")
def release_sweep(sweep_id: SweepId, service: ServiceDep, caller: CallerDep) -> SweepPublic:
    """Lets a held sweep's queued members start again. Owner or admin; 409 if none is
    queued."""
    return views.detail(service.db, service.sweeps.hold(sweep_id, caller, held=False))
