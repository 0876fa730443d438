"""`/v1/jobs/{id}/terminal`: a WebSocket to a running session's terminal (`gpuq shell`).

Binary messages both ways are the terminal's bytes; the client sends its window as a
text message `{"rows": R, "cols": C}`. Only the session's owner attaches, once: when the
socket closes, the session ends. A refusal is a close code of 4000 + the HTTP status it
stands for (4403, 4404, 4409, 4503), its reason the message.
"""

import contextlib
from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, WebSocket, WebSocketDisconnect

from gpuq.contract.rundir import RunDir
from service import jobs
from service.api.deps import JobId, ServiceDep, get_caller
from service.errors import GpuqError
from service.jobs import terminal

router = APIRouter(tags=["jobs"])

#: WebSocket close reasons are at most 123 bytes
MAX_REASON = 120


@router.websocket("/v1/jobs/{job_id}/terminal")
async def job_terminal(
    websocket: WebSocket,
    job_id: JobId,
    service: ServiceDep,
    authorization: Annotated[str | None, Header()] = None,
) -> None:
    await websocket.accept()
    try:
        caller = await get_caller(websocket, service, authorization)
        job = jobs.get_job(service.db, job_id)
        runner_pid = terminal.check_attach(job, caller)
        sock = terminal.connect_to_runner(
            RunDir.of(service.settings.runs_dir, job_id, job.attempt), runner_pid
        )
    except (GpuqError, HTTPException) as exc:
        code = exc.status_code
        message = exc.message if isinstance(exc, GpuqError) else str(exc.detail)
        await websocket.close(4000 + code, message.encode()[:MAX_REASON].decode(errors="ignore"))
        return
    await terminal.relay(websocket, sock)
    with contextlib.suppress(RuntimeError, WebSocketDisconnect):  # the user left first
        await websocket.close()
