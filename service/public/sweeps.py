"""Sweeps as the API shows them: a summary, the leaderboard of members, the curves."""

from datetime import datetime
from typing import Any

from pydantic import BaseModel
from pydantic import Field as PydanticField

from gpuq.contract.states import JobStatus, Reason
from gpuq.contract.sweep import SweepSpec
from service.usage.public import described


class SweepMember(BaseModel):
    job_id: int = described("The member's job id: its logs, metrics and artifacts are a job's.")
    name: str = described("The job's name: the sweep's, numbered.")
    params: dict[str, Any] = described("The values this member was given.")
    status: JobStatus = described("The job's state.")
    reason: Reason | None = described(
        "Why it ended: `early_stopped` if the stopping rule stopped it."
    )
    message: str | None = described("The job's one-line explanation of `reason`.")
    held: bool = described("Kept from starting until the sweep (or the job) is released.")
    epochs: int = described("Epochs it reported.")
    best: float | None = described("Its best value of the sweep's metric; null before any.")
    last: float | None = described("Its latest value of the metric.")
    rank: int | None = described("1 for the best member by `best`; null while it has no value.")
    started_at: datetime | None = described("Launched (UTC).")
    finished_at: datetime | None = described("Ended (UTC).")


class SweepBest(BaseModel):
    job_id: int = described("The best member so far.")
    params: dict[str, Any] = described("Its parameters.")
    value: float = described("Its best value of the metric.")


class SweepSummary(BaseModel):
    id: int = described("The sweep's id.")
    name: str = described("The spec's `name`; members are named NAME-1, NAME-2, ...")
    owner: str = described("Who submitted it; it owns every member.")
    priority: int = described("Every member's priority.")
    status: str = described(
        "`queued` (no member started yet), `running` (members run or wait their turn), "
        "`ended` (every member ended), `cancelled` (cancelled, every member ended)."
    )
    held: bool = described("Its queued members are held (`POST .../release` lets them start).")
    size: int = described("How many members it made.")
    counts: dict[str, int] = described('Members by state: `{"queued": 2, "running": 2, ...}`.')
    metric: str | None = described("The metric that ranks members.")
    mode: str = described("`min` or `max`: which way the metric is better.")
    max_parallel: int | None = described("At most this many members run at once.")
    spec: SweepSpec = described("The sweep as accepted (a random search's `seed` filled in).")
    warnings: list[str] = described("Things gpuq noticed, e.g. a metric no member reports.")
    cancelled_by: str | None = described("Who cancelled it, if anyone did.")
    created_at: datetime = described("Submitted (UTC).")
    finished_at: datetime | None = described("When its last member ended (UTC), once all have.")
    hidden: list[str] = PydanticField(
        default_factory=list,
        description="Fields of someone else's sweep left out for you, as its members' are: "
        "`spec.webhook`; under GPUQ_RUN_AS=owner also e.g. `spec.command.env`, "
        "`spec.idle_exempt`, `members.message` (then gpuq's words for its `reason` alone). "
        "Empty: all shown.",
    )


class SweepPublic(SweepSummary):
    best: SweepBest | None = described("The member on top of the leaderboard, and its parameters.")
    members: list[SweepMember] = described("The leaderboard: the best member first.")


class SweepPage(BaseModel):
    sweeps: list[SweepSummary] = described("This page of sweeps, newest first (no leaderboards).")
    next_cursor: str | None = described("Pass as `cursor` for the next page; null on the last.")


class SweepCurve(BaseModel):
    job_id: int = described("The member.")
    params: dict[str, Any] = described("Its parameters.")
    status: JobStatus = described("Its state.")
    epochs: list[int] = described("The epochs that reported the metric.")
    values: list[float | None] = described("The metric at each of them (null: not a number).")


class SweepCurves(BaseModel):
    metric: str | None = described("The sweep's metric.")
    members: list[SweepCurve] = described("Every member's curve, in member order.")
