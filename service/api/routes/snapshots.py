"""`/v1/snapshots`: store a project's snapshot (a tar), ask whether it is stored, read it
back. Only the users who stored a snapshot, and admins, read it."""

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any, BinaryIO

from fastapi import APIRouter, Path, Query, Request, Response, status
from fastapi.responses import StreamingResponse
from starlette.requests import ClientDisconnect

from gpuq.contract.spec_fields import SHA256
from service.api.deps import CallerDep, ServiceDep
from service.api.errors import Detail, documented
from service.api.serialized import as_json
from service.snapshots import receive_snapshot
from service.snapshots.public import SnapshotListing, SnapshotPublic
from service.snapshots.reads import open_tar, readable_snapshot, snapshots_of, stored_for
from service.snapshots.refusals import NotATar

router = APIRouter(prefix="/v1/snapshots", tags=["snapshots"])

Sha256 = Annotated[
    str, Path(pattern=SHA256, description="The snapshot's sha256: 64 lowercase hex digits.")
]
#: the tar read back: streamed a block at a time, never whole in memory
READ_BYTES = 1024 * 1024


def refused(description: str) -> dict[str, Any]:
    return {"model": Detail, "description": description}


UPLOAD_ANSWERS: dict[int | str, dict[str, Any]] = {
    200: {"model": SnapshotPublic, "description": "Those bytes were stored already."},
    400: refused(
        "An empty body, not an uncompressed tar, a member refused (an absolute name, '..', a "
        "hard link, a device or FIFO), or a body whose sha256 is not the `sha256` given."
    ),
    413: refused("Over GPUQ_SNAPSHOT_MAX_MB, or past the caller's GPUQ_SNAPSHOT_QUOTA_MB."),
    **documented(401),
}
READ_ANSWERS: dict[int | str, dict[str, Any]] = {
    404: refused("No snapshot the caller stored by that name (admins read every one)."),
    **documented(401),
}
TAR_BODY = {
    "requestBody": {
        "required": True,
        "description": "The snapshot: an uncompressed tar, streamed.",
        "content": {"application/x-tar": {"schema": {"type": "string", "format": "binary"}}},
    }
}


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=SnapshotPublic,
    responses=UPLOAD_ANSWERS,
    openapi_extra=TAR_BODY,
)
async def upload_snapshot(
    request: Request,
    service: ServiceDep,
    caller: CallerDep,
    sha256: Annotated[
        str | None,
        Query(pattern=SHA256, description="The sha256 the client computed; 400 if it differs."),
    ] = None,
) -> Response:
    """Stores a snapshot of a project (an uncompressed tar, Content-Type
    `application/x-tar`), named by its sha256, for the caller: 201 when new to them, 200
    when they stored those bytes already. Bytes someone else stored are not written again:
    the caller owns them too, and learns nothing of the other. gpuq never unpacks it:
    members are checked by their headers alone."""
    length = request.headers.get("content-length")
    received = await receive_snapshot(
        service.db,
        service.settings,
        _request_body(request),
        caller.name,
        claimed=sha256,
        length=int(length) if length and length.isascii() and length.isdigit() else None,
    )
    answer = status.HTTP_201_CREATED if received.created else status.HTTP_200_OK
    return as_json(SnapshotPublic.of(received.snapshot, received.stored_at), answer)


async def _request_body(request: Request) -> AsyncIterator[bytes]:
    try:
        async for chunk in request.stream():
            yield chunk
    except ClientDisconnect:
        raise NotATar("the upload ended before its body did") from None


@router.get("", responses=documented(401))
def list_snapshots(service: ServiceDep, caller: CallerDep) -> SnapshotListing:
    """The caller's snapshots, the most recently stored first, with what they hold in all
    against GPUQ_SNAPSHOT_QUOTA_MB."""
    return snapshots_of(service.db, service.settings, caller.name)


@router.head(
    "/{sha256}",
    responses={
        200: {"description": "The caller stored it: no need to upload it again."},
        404: {"description": "The caller did not store it (it may be someone else's)."},
        401: {"description": "No token, or an unknown or revoked one."},
    },
)
async def snapshot_is_stored(sha256: Sha256, service: ServiceDep, caller: CallerDep) -> Response:
    """Whether the caller stored this snapshot (200) or not (404): what `gpuq run` asks
    before uploading. Yes keeps it stored a while, for the job submitted next."""
    stored = await asyncio.to_thread(stored_for, service.db, service.settings, sha256, caller.name)
    return Response(status_code=status.HTTP_200_OK if stored else status.HTTP_404_NOT_FOUND)


@router.get("/{sha256}", responses=READ_ANSWERS)
def read_snapshot(sha256: Sha256, service: ServiceDep, caller: CallerDep) -> SnapshotPublic:
    """A snapshot's record, for the users who stored it and admins (404 for others, as for
    a snapshot nobody stored)."""
    row, stored_at = readable_snapshot(service.db, sha256, caller.name, admin=caller.admin)
    return SnapshotPublic.of(row, stored_at)


@router.get(
    "/{sha256}/tar",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/x-tar": {}}, "description": "The snapshot's tar."},
        **READ_ANSWERS,
    },
)
async def read_snapshot_tar(
    sha256: Sha256, service: ServiceDep, caller: CallerDep
) -> StreamingResponse:
    """The snapshot's tar as stored, for the users who stored it and admins."""
    tar = await asyncio.to_thread(
        open_tar, service.db, service.settings, sha256, caller.name, admin=caller.admin
    )
    return StreamingResponse(
        _tar_blocks(tar),
        media_type="application/x-tar",
        headers={"Content-Length": str(os.fstat(tar.fileno()).st_size)},
    )


def _tar_blocks(tar: BinaryIO) -> Iterator[bytes]:
    with tar:
        while block := tar.read(READ_BYTES):
            yield block
