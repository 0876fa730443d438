"""The tools on jobs: submit, run a command, dry run, list, show, log, metrics, cancel,
hold and release; each one or a few of the user's own API calls."""

import codecs
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from gpuq.client import Gpuq, Job, Preview
from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus
from service.cli.agent import command_run
from service.cli.agent.answers import JobDetail, JobList, LogPart, MetricsPart, Submitted
from service.cli.agent.command_run import CommandRun
from service.cli.agent.tooling import CHANGES, DESTROYS, READS, add_tools, flat

JobId = Annotated[int, Field(ge=1, le=2**53, description="The job's id.")]
#: the most of a log one call returns
LOG_BYTES = 64 * 1024

RUN_COMMAND = (
    "Run a program on gpuq's GPUs as `gpuq run` does: from a project folder, with GPUs, "
    "memory, a time limit, environment and, with `sweep`, one job per combination of "
    "values. Answers `job` (or `sweep`); follow it with show_job, job_log or the "
    "gpuq://jobs/{id}/log resource."
)
DRY_RUN = (
    "Say where and when run_command's job would start now, and why it would wait if it "
    "would; nothing is queued. Use it before asking for GPUs the box may not have free."
)


def add_job_tools(mcp: MCPServer, gq: Gpuq) -> None:
    """Adds the job tools for the user behind `gq`."""
    tools = JobTools(gq)
    run_command = flat(CommandRun, tools.run, "run_command", RUN_COMMAND)
    dry_run = flat(CommandRun, tools.dry_run, "dry_run", DRY_RUN)
    reads = (tools.list_jobs, tools.show_job, tools.job_log, tools.job_metrics)
    add_tools(mcp, READS, tools.preview_job, dry_run, *reads)
    add_tools(mcp, CHANGES, tools.submit_job, run_command, tools.hold_job, tools.release_job)
    add_tools(mcp, DESTROYS, tools.cancel_job)


class JobTools:
    """The job tools of the user behind `gq`: a method a tool, its docstring what the agent
    reads about it."""

    def __init__(self, gq: Gpuq) -> None:
        self.gq = gq

    def submit_job(self, spec: JobSpec) -> Job:
        """Queue a job from a full job spec (the body of POST /v1/jobs: a Keras `keras`
        section, or a `command`). To run a program from a folder, run_command is simpler."""
        return self.gq.submit(spec)

    def preview_job(self, spec: JobSpec) -> Preview:
        """Say where a job spec would start now, or why it would wait; nothing is queued."""
        return self.gq.preview(spec)

    def run(self, given: CommandRun) -> Submitted:
        spec = command_run.snapshotted(self.gq.http, command_run.spec_of(given), given)
        if given.sweep:
            return Submitted(sweep=self.gq.submit_sweep(spec))
        return Submitted(job=self.gq.submit(spec))

    def dry_run(self, given: CommandRun) -> Preview:
        if given.sweep:
            raise ValueError("sweep: a dry run takes one job: give single values instead")
        return self.gq.preview(command_run.spec_of(given))

    def list_jobs(
        self,
        status: list[JobStatus] = [],  # noqa: B006 (the SDK copies arguments)
        owner: str | None = None,
        limit: Annotated[int, Field(ge=1, le=100)] = 20,
        cursor: str | None = None,
    ) -> JobList:
        """List jobs, newest first, a page at a time (`next_cursor` for the next), optionally
        only some states or one owner's. Others' jobs show without their private fields."""
        params: dict[str, Any] = {"limit": limit, "status": [str(s) for s in status]}
        params |= {k: v for k, v in (("owner", owner), ("cursor", cursor)) if v}
        page = self.gq.http.json("GET", "/v1/jobs", params=params)
        jobs = [Job.model_validate(j) for j in page["jobs"]]
        return JobList(jobs=jobs, next_cursor=page.get("next_cursor"))

    def show_job(self, job_id: JobId) -> JobDetail:
        """One job now: state, why it ended or why it waits, GPUs, progress, latest
        metrics, its spec. For a failure's cause and what to do, triage_job says more."""
        return JobDetail.model_validate(self.gq.http.json("GET", f"/v1/jobs/{job_id}"))

    def job_log(
        self,
        job_id: JobId,
        tail_lines: Annotated[int, Field(ge=1, le=2000)] = 100,
        offset: Annotated[int, Field(ge=0)] | None = None,
    ) -> LogPart:
        """Read a job's output (stdout and stderr): by default its last `tail_lines`; with
        `offset`, up to 64 KiB from that byte (pass `next_offset` to read on)."""
        if offset is not None:
            return _log_from(self.gq, job_id, offset)
        path = f"/v1/jobs/{job_id}/logs"
        answer = self.gq.http.request("GET", path, params={"tail": tail_lines})
        size = int(answer.headers.get("X-Next-Offset", "0"))
        text = answer.content[-LOG_BYTES:].decode("utf-8", "replace")
        more = None
        if len(answer.content) > LOG_BYTES:
            more = "the start of these lines is cut at 64 KiB: read them with offset"
        elif size > len(answer.content):
            more = f"earlier output: call again with offset=0 ({size} bytes in all)"
        return LogPart(job_id=job_id, text=text, next_offset=size, more=more)

    def job_metrics(
        self,
        job_id: JobId,
        last_epochs: Annotated[int, Field(ge=1, le=1000)] = 50,
        last_steps: Annotated[int, Field(ge=0, le=1000)] = 20,
    ) -> MetricsPart:
        """A job's metric history: per epoch (loss, accuracy, validation...) and sampled
        steps, the latest `last_epochs` and `last_steps` of them."""
        history = self.gq.http.json("GET", f"/v1/jobs/{job_id}/metrics")
        epochs, steps = history.get("epochs", []), history.get("steps", [])
        left = len(epochs) - last_epochs
        more = f"{left} earlier epochs: raise last_epochs" if left > 0 else None
        kept = steps[-last_steps:] if last_steps else []
        return MetricsPart(job_id=job_id, epochs=epochs[-last_epochs:], steps=kept, more=more)

    def cancel_job(self, job_id: JobId) -> Job:
        """Cancel a job: a queued one at once, a running one with SIGTERM (it may save),
        then SIGKILL after the grace period. It cannot be resumed; rerun makes a new job."""
        return self.gq.cancel(job_id)

    def hold_job(self, job_id: JobId) -> Job:
        """Keep a queued job from starting until release_job; it keeps its place."""
        return self.gq.hold(job_id)

    def release_job(self, job_id: JobId) -> Job:
        """Let a held job start again (one held by hold_job); it keeps its place in the
        queue."""
        return self.gq.release(job_id)


def _log_from(gq: Gpuq, job_id: int, offset: int) -> LogPart:
    """Up to `LOG_BYTES` of the log from `offset`, cut after a whole line when it goes on."""
    got = b""
    for chunk in gq.http.stream(f"/v1/jobs/{job_id}/logs", offset=offset):
        got += chunk
        if len(got) > LOG_BYTES:
            break
    more = None
    if len(got) > LOG_BYTES:
        line_end = got.rfind(b"\n", 0, LOG_BYTES)
        got = got[: line_end + 1 if line_end >= 0 else LOG_BYTES]
        more = "the log goes on: call again with offset=next_offset"
    text = codecs.decode(got, "utf-8", "replace")
    return LogPart(job_id=job_id, text=text, next_offset=offset + len(got), more=more)
