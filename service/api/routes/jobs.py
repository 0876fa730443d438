"""`/v1/jobs`: submit, list, read, cancel, logs and metrics."""

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Header, Query, Response, status
from fastapi.responses import PlainTextResponse, StreamingResponse
from sqlmodel import col, select

from service import admission, jobs
from service.api.deps import ANONYMOUS, JobId, ServiceDep
from service.api.errors import documented
from service.logs import follow_log, read_log
from service.models import JobMetric, JobPage, JobPublic, MetricHistory, Preview
from service.spec import JobSpec
from service.states import TERMINAL, JobStatus
from worker.rundir import RunDir

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=documented(400, 404, 409, 413))


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses={
        200: {
            "model": JobPublic | Preview,
            "description": "A replayed `Idempotency-Key` (the original job), or a dry run.",
        }
    },
)
def submit_job(
    spec: JobSpec,
    service: ServiceDep,
    response: Response,
    idempotency_key: Annotated[
        str | None,
        Header(min_length=1, max_length=200, description="Same key, same job: replays are safe."),
    ] = None,
    dry_run: Annotated[
        bool, Query(description="Only say where the job would go now, or why it would wait.")
    ] = False,
) -> JobPublic | Preview:
    """Queues a training job. 422 names the field when the spec can never run here."""
    admission.check(spec, service.board.inventory.devices, service.settings.gpu_headroom_mb)
    if dry_run:
        response.status_code = status.HTTP_200_OK
        return service.scheduler.preview(spec)
    job, created = jobs.create_job(
        service.db, spec=spec, owner=ANONYMOUS, idempotency_key=idempotency_key
    )
    if created:
        service.scheduler.wake()
    else:
        response.status_code = status.HTTP_200_OK
    return JobPublic.of(job)


@router.get("")
def list_jobs(
    service: ServiceDep,
    status: Annotated[list[JobStatus], Query(description="Only these states.")] = [],  # noqa: B006
    owner: Annotated[str | None, Query(max_length=128)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=32, description="From `next_cursor`.")] = None,
) -> JobPage:
    """Jobs, newest first, a page at a time."""
    page, next_cursor = jobs.list_jobs(
        service.db, statuses=status, owner=owner, limit=limit, cursor=cursor
    )
    return JobPage(jobs=[JobPublic.of(j) for j in page], next_cursor=next_cursor)


@router.get("/{job_id}")
def get_job(job_id: JobId, service: ServiceDep) -> JobPublic:
    """One job: state, reason, GPUs, progress, latest metrics."""
    return JobPublic.of(jobs.get_job(service.db, job_id))


@router.post("/{job_id}/cancel", status_code=status.HTTP_202_ACCEPTED)
def cancel_job(job_id: JobId, service: ServiceDep) -> JobPublic:
    """Cancels a queued job at once; a running one gets SIGTERM, then SIGKILL after the grace
    period. 409 if the job already ended."""
    job = jobs.cancel_job(service.db, job_id)
    service.scheduler.wake()
    return JobPublic.of(job)


@router.get(
    "/{job_id}/logs",
    response_class=PlainTextResponse,
    responses={
        200: {"description": "The log, as text.", "content": {"text/plain": {}}},
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
    tail: Annotated[
        int | None, Query(ge=1, le=100_000, description="Only the last N lines.")
    ] = None,
    offset: Annotated[int, Query(ge=0, le=2**53, description="Start at this byte.")] = 0,
    follow: Annotated[bool, Query(description="Stream until the job ends.")] = False,
) -> Response:
    """The current attempt's output (stdout and stderr) as text/plain."""
    job = jobs.get_job(service.db, job_id)
    runs = service.settings.runs_dir
    media_type = "text/plain; charset=utf-8"
    if follow:

        def current_log() -> Path | None:
            attempt = jobs.get_job(service.db, job_id).attempt
            return RunDir.of(runs, job_id, attempt).log if attempt else None

        def ended() -> bool:
            return jobs.get_job(service.db, job_id).status in TERMINAL

        return StreamingResponse(follow_log(current_log, ended, offset), media_type=media_type)
    if not job.attempt:
        return Response(b"", media_type=media_type)
    body = read_log(RunDir.of(runs, job_id, job.attempt).log, offset=offset, tail=tail)
    return Response(body, media_type=media_type)


@router.get("/{job_id}/metrics")
def job_metrics(job_id: JobId, service: ServiceDep) -> MetricHistory:
    """Per-epoch metrics and sampled per-step metrics, each position once."""
    jobs.get_job(service.db, job_id)
    with service.db.read() as session:
        rows = session.exec(
            select(JobMetric)
            .where(JobMetric.job_id == job_id)
            .order_by(col(JobMetric.epoch), col(JobMetric.step))
        ).all()
    return MetricHistory.model_validate(
        {
            "epochs": [{"epoch": r.epoch, **r.values} for r in rows if r.step == 0],
            "steps": [{"epoch": r.epoch, "step": r.step, **r.values} for r in rows if r.step],
        }
    )
