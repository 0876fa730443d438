"""The interface between the scheduler and whatever runs its jobs."""

import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from gpuq.contract.device_plan import DevicePlan
from gpuq.contract.rundir import RunDir
from gpuq.contract.spec import JobSpec


class LaunchError(OSError):
    """The executor could not start the job; the message says why."""


@dataclass(frozen=True)
class Launch:
    """A placed job, ready to start."""

    job_id: int
    attempt: int
    spec: JobSpec
    devices: DevicePlan
    resume_from: int | None = None  #: an earlier attempt whose checkpoints it resumes from


@dataclass(frozen=True)
class Started:
    #: the runner's pid, which leads the job's process group; None where no local process
    #: stands for the job
    runner_pid: int | None


@dataclass(frozen=True)
class Exit:
    job_id: int
    record: dict[str, Any] | None  #: the runner's `exit.json`; None if it never wrote one


class Executor(Protocol):
    name: str

    def open(self, on_exit: Callable[[], None]) -> None:
        """Gets ready to start jobs; calls `on_exit` (from any thread) when one may have
        ended, so the scheduler need not wait for its next tick."""

    def close(self) -> None:
        """Stops starting jobs; the running ones go on."""

    def run_dir(self, job_id: int, attempt: int) -> RunDir:
        """Where an attempt's files are, as this process can read them."""

    def start(self, launch: Launch) -> Started:
        """Writes the run directory and starts the job; `LaunchError` if it cannot."""

    def adopt(self, job_id: int, attempt: int, runner_pid: int | None) -> bool:
        """Takes back a job a previous service started; True if it still runs (an ended
        one is reported by the next `exited`)."""

    def exited(self) -> list[Exit]:
        """The jobs that ended since the last call, each once, with their exit records;
        whatever they left running is gone."""

    def signal(self, job_id: int, sig: signal.Signals) -> None:
        """Sends `sig` to every process of the job (SIGTERM to stop, SIGKILL to end)."""

    def process_groups(self) -> dict[int, int]:
        """Process group → job, for the jobs whose processes run on this host (GPU memory
        is attributed to jobs by process group)."""
