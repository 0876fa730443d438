"""What the scheduler keeps in memory: each launched job, and what every step works with."""

import time
from dataclasses import dataclass, field

from gpuq.contract.rundir import RunDir
from service.executors import Executor, Started
from service.gpus.registry import GpuRegistry
from service.scheduler.stats import SchedulerStats
from service.settings import Settings
from service.store.db import Database

#: A running job's average GPU utilisation is saved every this many samples (and at its
#: end), so a restart loses at most these.
UTIL_SAVE_EVERY = 10


@dataclass
class MemoryRecord:
    """What sampling has learnt about one running job's GPU memory."""

    cap_mb: int | None
    peak_mb: int = 0
    warned: bool = False  #: over its cap under `GPUQ_OVER_CAP=warn`, said once
    off_gpus: set[int] = field(default_factory=set)  #: GPUs it used without being given them
    #: GPU index → pids seen holding memory there (a dead pid's memory can linger)
    pids: dict[int, set[int]] = field(default_factory=dict)
    held_mb: int = 0  #: what it held on its GPUs at the last sample
    util_pct: int | None = None  #: its busiest GPU's utilisation then (None: unknown)
    util_avg_pct: float | None = None  #: its GPUs' average utilisation over the samples
    util_samples: int = 0

    def sample_utilisation(self, busy: list[int]) -> bool:
        """Adds a sample of its GPUs' utilisation (one per GPU); True when the average is
        due to be saved (every `UTIL_SAVE_EVERY` samples)."""
        if not busy:
            return False
        mean = sum(busy) / len(busy)
        before = (self.util_avg_pct or 0.0) * self.util_samples
        self.util_samples += 1
        self.util_avg_pct = (before + mean) / self.util_samples
        return self.util_samples % UTIL_SAVE_EVERY == 0


@dataclass
class Activity:
    """Whether a running job trains (the idle rule); times on the monotonic clock."""

    exempt: bool = False  #: the spec's `idle_exempt`: never idle
    #: a session: GPUs held with no memory on them are held idle too (a forgotten shell)
    interactive: bool = False
    since: float = field(default_factory=time.monotonic)  #: started, or taken back
    last_step: float = field(default_factory=time.monotonic)  #: a step or epoch reported
    idle_since: float | None = None  #: declared idle then; None while it trains


@dataclass
class Running:
    """A launched job, from its start (or re-adoption) until its exit is reaped."""

    job_id: int
    run: RunDir
    gpus: list[int]
    memory: MemoryRecord
    offset: int = 0  #: how far into `events.jsonl` has been ingested
    killed: bool = False  #: SIGKILL sent: nothing more to send
    activity: Activity = field(default_factory=Activity)


@dataclass
class Books:
    """What every step reads and keeps: the database, the GPUs, the executor that runs the
    jobs, and the jobs it runs."""

    db: Database
    settings: Settings
    gpus: GpuRegistry
    executor: Executor
    stats: SchedulerStats = field(default_factory=SchedulerStats)
    running: dict[int, Running] = field(default_factory=dict)
    #: jobs launched since the scheduler's last write: what their launch added (the
    #: runner's pid, the executor's id), for that write to record (`finishing.settle`)
    unrecorded: dict[int, Started] = field(default_factory=dict)
    #: how many times this scheduler recorded a job's epoch metrics (`ingest.advance`):
    #: early stopping has nothing new to judge while it stays the same
    epochs_recorded: int = 0
