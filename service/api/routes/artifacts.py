"""`/v1/jobs/{id}/artifacts`: list and download a job's model, history, checkpoints and
TensorBoard logs."""

from typing import Annotated

from fastapi import APIRouter, Path, Query
from fastapi.responses import FileResponse

from service import jobs
from service.api.deps import CallerDep, JobId, ServiceDep
from service.api.errors import documented
from service.artifacts import find_artifact, list_artifacts
from service.errors import Invalid, NotFound
from service.models import ArtifactList, ArtifactPublic
from worker.rundir import RunDir

router = APIRouter(prefix="/v1/jobs", tags=["artifacts"], responses=documented(401, 404))

Attempt = Annotated[
    int | None,
    Query(ge=1, le=1000, description="An earlier attempt's files (default: the latest)."),
]


def _attempt(service: ServiceDep, job_id: int, attempt: int | None) -> int:
    """The attempt asked for, or the latest; 0 for a job never launched."""
    job = jobs.get_job(service.db, job_id)
    if attempt is not None and attempt > job.attempt:
        raise Invalid(("query", "attempt"), f"job {job_id} has had {job.attempt} attempt(s)")
    return attempt or job.attempt


@router.get("/{job_id}/artifacts")
def job_artifacts(
    job_id: JobId, service: ServiceDep, caller: CallerDep, attempt: Attempt = None
) -> ArtifactList:
    """The files a job left: `model.keras`, `history.json`, `checkpoints/...`,
    `tensorboard/...` (and whatever a command job wrote to `$GPUQ_ARTIFACTS_DIR`)."""
    chosen = _attempt(service, job_id, attempt)
    runs = service.settings.runs_dir
    found = list_artifacts(RunDir.of(runs, job_id, chosen)) if chosen else []
    return ArtifactList(
        job_id=job_id, attempt=chosen, artifacts=[ArtifactPublic(**vars(a)) for a in found]
    )


@router.get(
    "/{job_id}/artifacts/{name:path}",
    response_class=FileResponse,
    responses={
        200: {"description": "The file.", "content": {"application/octet-stream": {}}},
        **documented(404),
    },
)
def download_artifact(
    job_id: JobId,
    name: Annotated[str, Path(description="A name from the listing, e.g. `model.keras`.")],
    service: ServiceDep,
    caller: CallerDep,
    attempt: Attempt = None,
) -> FileResponse:
    """Downloads one file; names that would lead outside the job's folders are refused."""
    chosen = _attempt(service, job_id, attempt)
    if not chosen:
        raise NotFound(f"job {job_id} has not started, so it has no files yet")
    artifact = find_artifact(RunDir.of(service.settings.runs_dir, job_id, chosen), name)
    return FileResponse(
        artifact.path,
        media_type="application/octet-stream",
        filename=artifact.name.rsplit("/", 1)[-1],
    )
