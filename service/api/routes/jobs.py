"""`/v1/jobs`: submit, run again, list, read, cancel, logs and metrics."""

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Query, Response, status
from fastapi.responses import PlainTextResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus
from service import jobs
from service.api.deps import CallerDep, JobId, ServiceDep
from service.api.errors import documented
from service.api.serialized import as_json
from service.jobs import rerun
from service.jobs.changes import wait_for_change
from service.jobs.logs import follow_log, read_log
from service.jobs.privacy import as_seen_by
from service.public import JobPage, JobPublic, MetricHistory, Preview

NEXT_OFFSET = "X-Next-Offset"

router = APIRouter(
    prefix="/v1/jobs", tags=["jobs"], responses=documented(400, 401, 403, 404, 409, 413, 429, 503)
)


class JobChange(BaseModel):
    """Fields of a job that may change after submission."""

    model_config = ConfigDict(extra="forbid", strict=True)
    priority: int | None = Field(
        None, ge=-1000, le=1000, description="New priority; only admins may raise it."
    )


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=JobPublic | Preview,
    responses={
        200: {
            "model": JobPublic | Preview,
            "description": "A replayed `Idempotency-Key` (the original job), or a dry run.",
        }
    },
)
async def submit_job(
    spec: JobSpec,
    service: ServiceDep,
    caller: CallerDep,
    idempotency_key: Annotated[
        str | None,
        Header(min_length=1, max_length=200, description="Same key, same job: replays are safe."),
    ] = None,
    dry_run: Annotated[
        bool, Query(description="Only say where the job would go now, or why it would wait.")
    ] = False,
) -> Response:
    """Queues a training job. 422 names the field when the spec can never run here."""
    if dry_run:
        return as_json(await asyncio.to_thread(service.jobs.preview, spec, caller))
    stored = await service.jobs.submit_async(spec, caller, idempotency_key)
    created = status.HTTP_201_CREATED if stored.created else status.HTTP_200_OK
    return as_json(JobPublic.of(stored.row), created)


@router.post(
    "/{job_id}/rerun", status_code=status.HTTP_201_CREATED, response_model=JobPublic | Preview
)
async def rerun_job(
    job_id: JobId,
    service: ServiceDep,
    caller: CallerDep,
    changes: Annotated[
        dict[str, Any] | None,
        Body(
            description='Changes to its spec, merged in: `{"resources": {"gpus": 2}}` '
            "changes the GPUs and keeps the rest; null removes a field."
        ),
    ] = None,
    dry_run: Annotated[
        bool, Query(description="Only say where it would go now, or why it would wait.")
    ] = False,
) -> Response:
    """Submits a job again: the same spec, so the same snapshot (the same code), data and
    settings, with `changes` merged in; its owner or an admin. It waits for nothing
    (`depends_on` and `not_before` are not carried over); a sweep member's with its
    parameters, as a job of its own."""
    again = rerun.spec_again
    spec, params = await asyncio.to_thread(again, service.db, job_id, caller, changes or {})
    if dry_run:
        return as_json(await asyncio.to_thread(service.jobs.preview, spec, caller))
    stored = await service.jobs.submit_async(spec, caller, None, params=params)
    return as_json(JobPublic.of(stored.row), status.HTTP_201_CREATED)


@router.get("")
def list_jobs(
    service: ServiceDep,
    caller: CallerDep,
    status: Annotated[list[JobStatus], Query(description="Only these states.")] = [],  # noqa: B006
    owner: Annotated[str | None, Query(max_length=128)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=32, description="From `next_cursor`.")] = None,
) -> JobPage:
    """Jobs, newest first, a page at a time."""
    page, next_cursor = jobs.list_jobs(
        service.db, statuses=status, owner=owner, limit=limit, cursor=cursor
    )
    shown = [as_seen_by(caller, JobPublic.of(j), service.settings) for j in page]
    return JobPage(jobs=shown, next_cursor=next_cursor)


@router.get("/{job_id}", response_model=JobPublic)
async def get_job(
    job_id: JobId,
    service: ServiceDep,
    caller: CallerDep,
    wait_s: Annotated[
        float | None,
        Query(
            ge=0,
            le=300,
            description="Long poll: answer once the job changes (or has ended), at most "
            "this many seconds later.",
        ),
    ] = None,
    since: Annotated[
        int | None,
        Query(
            ge=0,
            le=2**53,
            description="With `wait_s`: wait for a `revision` above this one (default: the "
            "job's revision when the request arrives).",
        ),
    ] = None,
) -> Response:
    """One job: state, reason, GPUs, progress, latest metrics. With `wait_s`, a long poll."""
    if wait_s is None:
        job = JobPublic.of(jobs.read_job(service.db, job_id))  # one row: no thread hop
    else:
        job = JobPublic.of(await wait_for_change(service.db, job_id, since, wait_s))
    return as_json(as_seen_by(caller, job, service.settings))


@router.post("/{job_id}/cancel", status_code=status.HTTP_202_ACCEPTED)
def cancel_job(job_id: JobId, service: ServiceDep, caller: CallerDep) -> JobPublic:
    """Cancels a queued job at once; a running one gets SIGTERM, then SIGKILL after the grace
    period. Owner or admin; 409 if the job already ended."""
    return JobPublic.of(service.jobs.cancel(job_id, caller))


@router.post("/{job_id}/hold")
def hold_job(job_id: JobId, service: ServiceDep, caller: CallerDep) -> JobPublic:
    """Keeps a queued job from starting until it is released. Owner or admin; 409 unless
    queued."""
    return JobPublic.of(service.jobs.hold(job_id, caller, held=True))


@router.post("/{job_id}/release")
def release_job(job_id: JobId, service: ServiceDep, caller: CallerDep) -> JobPublic:
    """Lets a held job start again. Owner or admin; 409 unless queued."""
    return JobPublic.of(service.jobs.hold(job_id, caller, held=False))


@router.patch("/{job_id}")
def change_job(
    job_id: JobId, change: JobChange, service: ServiceDep, caller: CallerDep
) -> JobPublic:
    """Changes a job's priority: an admin freely, its owner only downwards."""
    job = service.jobs.change_priority(job_id, caller, change.priority)
    # `{}` changes nothing and answers anyone: as a read does. Otherwise owner or admin.
    return as_seen_by(caller, JobPublic.of(job), service.settings)


@router.get(
    "/{job_id}/logs",
    response_class=PlainTextResponse,
    responses={
        200: {
            "description": f"The log, as text; the `{NEXT_OFFSET}` header is the `offset` "
            "to ask for next (the log's size after a `tail`).",
            "content": {"text/plain": {}},
        },
        # Errors are JSON even here; FastAPI would document them as text/plain.
        404: {
            "description": "No such job.",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Detail"}}},
        },
    },
)
def job_logs(
    job_id: JobId,
    service: ServiceDep,
    caller: CallerDep,
    tail: Annotated[
        int | None, Query(ge=1, le=100_000, description="Only the last N lines.")
    ] = None,
    offset: Annotated[int, Query(ge=0, le=2**53, description="Start at this byte.")] = 0,
    follow: Annotated[bool, Query(description="Stream until the job ends.")] = False,
) -> Response:
    """The current attempt's output (stdout and stderr) as text/plain."""
    media_type = "text/plain; charset=utf-8"
    path = service.jobs.log_path(job_id, caller)  # 404 before any stream starts
    if follow:
        jobs_part = service.jobs
        stream = follow_log(
            lambda: jobs_part.log_path(job_id, caller), lambda: jobs_part.ended(job_id), offset
        )
        return StreamingResponse(stream, media_type=media_type)
    body, end = read_log(path, offset=offset, tail=tail) if path else (b"", 0)
    return Response(body, media_type=media_type, headers={NEXT_OFFSET: str(end)})


@router.get("/{job_id}/metrics")
def job_metrics(job_id: JobId, service: ServiceDep, caller: CallerDep) -> MetricHistory:
    """Per-epoch metrics and sampled per-step metrics, each position once."""
    return MetricHistory.model_validate(jobs.metric_history(service.db, job_id))
