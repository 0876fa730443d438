"""The usage tables: the ledger of ended attempts (`attempt_usage`), each owner's running
total (`usage_total`), and the daily rollup (`usage_day`, `attempt_day`). Written only by
`service.usage` (the ledger and the rollup), in the transactions that end attempts and jobs.
"""

from datetime import date, datetime

from sqlalchemy import JSON, Column, LargeBinary
from sqlmodel import Field, SQLModel

from gpuq.contract.spec import empty_list
from service.store.db import utc_field


class AttemptUsage(SQLModel, table=True):
    """One ended attempt of a job that held GPUs or a CPU slot: who, how many GPUs, from when
    to when, how it ended and what of it was lost. Written in the transaction that ends the
    attempt; `/v1/usage` reads a period of these by `ended_at`."""

    __tablename__ = "attempt_usage"

    id: int | None = Field(default=None, primary_key=True)
    job_id: int = Field(index=True)
    attempt: int
    owner: str = Field(index=True)
    gpus: int
    gpu_indices: list[int] = Field(
        default_factory=empty_list, sa_column=Column(JSON, nullable=False)
    )
    queued_at: datetime = utc_field()
    started_at: datetime = utc_field()
    ended_at: datetime = utc_field(index=True)
    #: succeeded, failed, cancelled, timed_out, or preempted (queued again)
    outcome: str
    reason: str | None = None
    final: bool  #: the job ended with it (False: it was queued again)
    gpu_seconds: float
    #: GPU-seconds of it no later attempt builds on: all of a failed job's last attempt, the
    #: work since the last checkpoint of an attempt retried or preempted
    lost_gpu_seconds: float = 0.0
    preempted_by: int | None = None


class UsageTotal(SQLModel, table=True):
    """Each owner's GPU-seconds over all ended attempts (a rollup of `attempt_usage`, kept
    in the same transactions): `gpuq_gpu_seconds_total` at a scrape costs one row per owner."""

    __tablename__ = "usage_total"

    owner: str = Field(primary_key=True)
    gpu_seconds: float = 0.0


class UsageDay(SQLModel, table=True):
    """One owner's usage on one UTC day: of all their attempts (`gpu` -1) and on each GPU
    (its index; -2: GPUs not known), kept in the transactions that end attempts and jobs
    (`usage.rollup`). A report reads the whole days of its period here: a row per day,
    owner and GPU, however many attempts the day held."""

    __tablename__ = "usage_day"

    day: date = Field(primary_key=True)
    owner: str = Field(primary_key=True)
    gpu: int = Field(primary_key=True)
    gpu_seconds: float = 0.0  #: the day's part of every attempt's GPU time
    lost_failures_s: float = 0.0  #: ...of the GPU time lost to failures
    lost_preemptions_s: float = 0.0  #: ...and to preemptions
    #: jobs that reached their final state that day
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    timed_out: int = 0
    #: the waits of attempts launched that day, counted in buckets (`usage.waits`)
    waits: bytes = Field(default=b"", sa_column=Column(LargeBinary, nullable=False, default=b""))


class AttemptDay(SQLModel, table=True):
    """Each UTC day an ended attempt (`attempt_usage`) held its GPUs on: how a report finds
    the attempts of a day it counts in part, by the day's key rather than by an interval."""

    __tablename__ = "attempt_day"

    day: date = Field(primary_key=True)
    usage_id: int = Field(primary_key=True)
