"""A job's log and metrics as MCP resources: `gpuq://jobs/12/log`, `gpuq://jobs/12/metrics`,
read with the user's own rights."""

import json
import re
from collections.abc import Callable
from typing import TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError

from gpuq.client import Gpuq
from gpuq.http import ApiError

LOG = "gpuq://jobs/{job_id}/log"
METRICS = "gpuq://jobs/{job_id}/metrics"
#: a resource's address: the job and which of its things
ADDRESS = re.compile(r"gpuq://jobs/(\d{1,16})/(log|metrics)")
#: the most of a log the resource holds: its end
LOG_BYTES = 256 * 1024


def add_job_resources(mcp: MCPServer, gq: Gpuq) -> None:
    """Adds the resource templates for the user behind `gq`."""

    @mcp.resource(
        LOG,
        name="job log",
        mime_type="text/plain",
        description="A job's output, stdout and stderr, its last 256 KiB (the job_log tool "
        "reads any part). Subscribe to hear when it grows.",
    )
    def job_log(job_id: str) -> str:
        text = _answered(lambda: gq.http.request("GET", f"/v1/jobs/{_id(job_id)}/logs").content)
        return text[-LOG_BYTES:].decode("utf-8", "replace")

    @mcp.resource(
        METRICS,
        name="job metrics",
        mime_type="application/json",
        description="A job's metric history as JSON: `epochs` (one entry per epoch) and "
        "sampled `steps`. Subscribe to hear when it changes.",
    )
    def job_metrics(job_id: str) -> str:
        history = _answered(lambda: gq.http.json("GET", f"/v1/jobs/{_id(job_id)}/metrics"))
        return json.dumps(history)


def _id(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 2**53:
        raise ResourceNotFoundError(f"{text!r} is not a job id")
    return int(text)


T = TypeVar("T")


def _answered(call: Callable[[], T]) -> T:
    try:
        return call()
    except ApiError as exc:
        if exc.status_code == 404:
            raise ResourceNotFoundError(str(exc)) from exc
        raise ResourceError(str(exc)) from exc
