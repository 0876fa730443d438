"""`/v1/events`: job changes as Server-Sent Events, for curl and the dashboard."""

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse

from service.api.deps import CallerDep, ServiceDep
from service.api.errors import documented
from service.digits import only_digits
from service.jobs.changes import follow_changes, latest_revision
from service.jobs.privacy import as_seen_by
from service.public import JobEvent
from service.runtime import Service
from service.team.users import Caller

router = APIRouter(tags=["events"], responses=documented(401))

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@router.get(
    "/v1/events",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "An endless `text/event-stream`: one `job` event (id: the job's "
            "`revision`; data: a JobEvent as JSON) per change to a job's state, progress or "
            "metrics, and a comment line every 15 s of quiet.",
            "content": {"text/event-stream": {}},
        }
    },
)
async def events(
    service: ServiceDep,
    caller: CallerDep,
    since: Annotated[
        int | None,
        Query(ge=0, le=2**53, description="Replay changes after this revision (default: now)."),
    ] = None,
    job_id: Annotated[list[int], Query(description="Only these jobs (repeatable).")] = [],  # noqa: B006
    owner: Annotated[str | None, Query(max_length=128, description="Only this owner's.")] = None,
    last_event_id: Annotated[
        str | None,
        Header(max_length=20, description="Sent by EventSource on reconnect: resume after it."),
    ] = None,
) -> StreamingResponse:
    """Streams job changes: `curl -N .../v1/events`."""
    if since is None and last_event_id is not None and only_digits(last_event_id):
        since = int(last_event_id)
    if since is None:
        since = await asyncio.to_thread(latest_revision, service.db)
    return StreamingResponse(
        _stream(service, caller, since, job_id, owner),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )


async def _stream(
    service: Service, caller: Caller, since: int, job_ids: list[int], owner: str | None
) -> AsyncIterator[str]:
    yield f"retry: 2000\n: gpuq events after revision {since}\n\n"
    async for job in follow_changes(service.db, since, job_ids=job_ids, owner=owner):
        if job is None:
            yield ": keep-alive\n\n"
            continue
        event = as_seen_by(caller, JobEvent.of(job), service.settings)
        data = json.dumps(event.model_dump(mode="json"), separators=(",", ":"))
        yield f"id: {job.rev}\nevent: job\ndata: {data}\n\n"
