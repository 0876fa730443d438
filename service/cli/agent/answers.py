"""What the tools answer, where the client's own models (`gpuq.client.Job`, `Sweep`...)
are not the whole answer: bounded parts of long things, each saying how to get more."""

from typing import Any

from pydantic import BaseModel, Field

from gpuq.client import Job, Preview, Sweep


class JobDetail(Job):
    """A job with what it was asked to do and what it waits on."""

    spec: dict[str, Any] | None = None  #: the spec as accepted, defaults filled in
    depends_on: list[int] = Field(default_factory=list)
    sweep_id: int | None = None
    params: dict[str, Any] | None = None  #: a sweep member's values
    memory_mb: int | None = None
    not_before: str | None = None
    warnings: list[str] = Field(default_factory=list)


class Submitted(BaseModel):
    """What run_command queued: a job, or with `sweep`, a sweep of jobs."""

    job: Job | None = None
    sweep: Sweep | None = None


class JobList(BaseModel):
    jobs: list[Job]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page.")


class LogPart(BaseModel):
    job_id: int
    text: str = Field(description="The log's lines (stdout and stderr together).")
    next_offset: int = Field(description="Pass as `offset` to read what comes after `text`.")
    more: str | None = Field(None, description="How to read what is left out, if anything is.")


class MetricsPart(BaseModel):
    job_id: int
    epochs: list[dict[str, Any]] = Field(description="One entry per epoch: `epoch` and values.")
    steps: list[dict[str, Any]] = Field(description="Sampled steps, the latest last.")
    more: str | None = Field(None, description="How to read what is left out, if anything is.")


class WaitingJob(BaseModel):
    id: int
    name: str
    owner: str
    position: int | None = Field(description="1: the next to start.")
    held: bool
    wait_reason: str | None = Field(description="Why it is not running yet.")


class Triage(BaseModel):
    job_id: int
    status: str
    verdict: str = Field(description="What happened, in one sentence.")
    next_steps: list[str] = Field(description="What to try, most likely first.")
    reason: str | None = None
    message: str | None = None
    exit_code: int | None = None
    wait_reason: str | None = None
    queue_position: int | None = None
    dry_run: Preview | None = Field(
        None, description="Where the same spec would start now, for a job still waiting."
    )
    log_tail: list[str] = Field(default_factory=list)
