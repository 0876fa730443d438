"""`/v1/jobs/{id}/artifacts`: list and download a job's model, history, checkpoints and
TensorBoard logs."""

import os
from collections.abc import Iterator
from typing import Annotated, BinaryIO
from urllib.parse import quote

from fastapi import APIRouter, Path, Query
from fastapi.responses import StreamingResponse

from service.api.deps import CallerDep, JobId, ServiceDep
from service.api.errors import documented
from service.public import ArtifactList, ArtifactPublic

CHUNK_BYTES = 256 * 1024

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
    chosen, found = service.jobs.artifacts(job_id, attempt, caller)
    return ArtifactList(
        job_id=job_id, attempt=chosen, artifacts=[ArtifactPublic(**vars(a)) for a in found]
    )


@router.get(
    "/{job_id}/artifacts/{name:path}",
    response_class=StreamingResponse,
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
) -> StreamingResponse:
    """Downloads one file; names that would lead outside the job's folders are refused."""
    artifact, opened = service.jobs.artifact(job_id, name, attempt, caller)
    filename = artifact.name.rsplit("/", 1)[-1]
    size = os.fstat(opened.fileno()).st_size
    return StreamingResponse(
        _chunks(opened),
        media_type="application/octet-stream",
        headers={"Content-Length": str(size), "Content-Disposition": _attachment(filename)},
    )


def _chunks(opened: BinaryIO) -> Iterator[bytes]:
    """The file that was checked when it was opened (the job may change its folder)."""
    with opened:
        while chunk := opened.read(CHUNK_BYTES):
            yield chunk


def _attachment(filename: str) -> str:
    if filename.isascii() and '"' not in filename:
        return f'attachment; filename="{filename}"'
    return f"attachment; filename*=utf-8''{quote(filename)}"
