"""`/v1/jobs/{id}/artifacts`: list and download a job's model, history, checkpoints and
TensorBoard logs."""

from typing import Annotated

from fastapi import APIRouter, Path, Query
from fastapi.responses import FileResponse

from gpuq.service.api.deps import CallerDep, JobId, ServiceDep
from gpuq.service.api.errors import documented
from gpuq.service.public import ArtifactList, ArtifactPublic

router = APIRouter(prefix="/v1/jobs", tags=["artifacts"], responses=documented(401, 404))

Attempt = Annotated[
    int | None,
    Query(ge=1, le=1000, description="An earlier attempt's files (default: the latest)."),
]


@router.get("/{job_id}/artifacts")
def job_artifacts(
    job_id: JobId, service: ServiceDep, caller: CallerDep, attempt: Attempt = None
) -> ArtifactList:
    """The files a job left: `model.keras`, `history.json`, `checkpoints/...`,
    `tensorboard/...` (and whatever a command job wrote to `$GPUQ_ARTIFACTS_DIR`)."""
    chosen, found = service.artifacts(job_id, attempt)
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
    artifact = service.artifact(job_id, name, attempt)
    return FileResponse(
        artifact.path,
        media_type="application/octet-stream",
        filename=artifact.name.rsplit("/", 1)[-1],
    )
