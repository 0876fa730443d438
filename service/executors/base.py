"""The interface between the scheduler and whatever runs its jobs."""

import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gpuq.contract.account import Account
from gpuq.contract.device_plan import DevicePlan
from gpuq.contract.rundir import RunDir
from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus, Reason
from service.executors.fences.shapes import FenceUsage


class LaunchError(OSError):
    """The executor could not start the job; the message says why."""


@dataclass(frozen=True)
class Launch:
    """A placed job (or, for a queueing executor, an admitted one), ready to start."""

    job_id: int
    attempt: int
    spec: JobSpec
    devices: DevicePlan
    resume_from: int | None = None  #: an earlier attempt whose checkpoints it resumes from
    # What a queueing executor orders and holds jobs by; the local executor needs none.
    priority: int = 0
    held: bool = False
    #: executor job ids of the jobs that must succeed before this one starts
    after: tuple[str, ...] = ()
    #: the owner's account the job runs as (GPUQ_RUN_AS=owner); None: gpuq's own
    run_as: Account | None = None
    #: folders the job's data must lie under (checked again as it is read); None: any
    data_roots: tuple[str, ...] | None = None
    #: a builtin job's training step that takes longer has hung (a stuck all-reduce)
    step_timeout_s: float | None = None
    #: a keras job on several nodes: how long an all-reduce may wait for the others
    collective_timeout_s: float | None = None
    #: a sweep member's parameters (`GPUQ_PARAM_<NAME>` in its environment)
    params: Mapping[str, Any] | None = None
    #: the CPU cores the job got (per node), fractional allowed; None: it asked for none
    cpus: float | None = None
    #: the host memory it got in MiB (per node); None: it asked for none
    host_memory_mb: int | None = None
    #: every GPU of the box (NVML indices): the fence denies the job those not its own
    box_gpus: tuple[int, ...] = ()
    #: the CPU cores nearest its GPUs (their NUMA nodes', from NVML); empty: not known
    near_cores: tuple[int, ...] = ()
    #: the stored tar of its snapshot (`command.snapshot`), copied into its run folder
    snapshot: Path | None = None
    #: the Slurm reservation it runs in (`sbatch --reservation`), if it names one not over
    slurm_reservation: str | None = None


@dataclass(frozen=True)
class Standby:
    """A runner started ahead of need, and its warm training process (None: still
    importing TensorFlow)."""

    runner_pid: int
    worker_pid: int | None


@dataclass(frozen=True)
class Started:
    #: the id the executor knows the attempt by: the runner's pid, the Slurm job id
    executor_job_id: str
    #: the runner's pid, which leads the job's process group; None where no local process
    #: stands for the job
    runner_pid: int | None = None


@dataclass(frozen=True)
class Verdict:
    """How the executor says a job ended, where its word beats the runner's record (Slurm
    ended it at its time limit, its node failed, it was preempted)."""

    status: JobStatus  #: `queued`: a new attempt at once, resuming from the checkpoint
    reason: Reason | None
    message: str


@dataclass(frozen=True)
class Exit:
    job_id: int
    record: dict[str, Any] | None  #: the runner's `exit.json`; None if it never wrote one
    verdict: Verdict | None = None  #: the executor's own word on the end, if it has one
    #: what it used of the box, as its fence measured it (None: no fence here)
    usage: FenceUsage | None = None


class Executor(Protocol):
    name: str

    def own_queue(self) -> "QueueingExecutor | None":
        """This executor as one with a queue of its own (Slurm), to which gpuq hands every
        admitted job; None where gpuq places jobs itself (this box). The one question the
        rest of gpuq asks of an executor's kind: the scheduler's steps are chosen by it."""

    def standbys(self) -> list[Standby]:
        """The runners started ahead of need with a warm training process (none where the
        executor keeps no warm pool)."""

    def open(self, on_exit: Callable[[], None]) -> None:
        """Gets ready to start jobs; calls `on_exit` (from any thread) when one may have
        ended, so the scheduler need not wait for its next tick."""

    def close(self) -> None:
        """Stops starting jobs; the running ones go on."""

    def run_dir(self, job_id: int, attempt: int) -> RunDir:
        """Where an attempt's files are, as this process can read them."""

    def start(self, launch: Launch) -> Started:
        """Writes the run directory and starts the job; `LaunchError` if it cannot."""

    def adopt(
        self, job_id: int, attempt: int, executor_job_id: str | None, *, session: bool = True
    ) -> bool:
        """Takes back a job a previous service started; True if it still runs (an ended
        one is reported by the next `exited`). `session`: an interactive session (or not
        known to be none), whose processes leave the runner's process group."""

    def exited(self) -> list[Exit]:
        """The jobs that ended since the last call, each once, with their exit records;
        whatever they left running is gone."""

    def signal(self, job_id: int, sig: signal.Signals) -> None:
        """Sends `sig` to every process of the job (SIGTERM to stop, SIGKILL to end)."""

    def job_sessions(self) -> dict[int, int]:
        """Session → job, for the jobs whose processes run on this host: each runner leads
        a session of its own, and GPU memory is attributed to jobs by session."""


@dataclass(frozen=True)
class Waiting:
    """A handed-over job its executor has not started yet."""

    why: str  #: the executor's words (Slurm's reason: `Resources`, `Priority`...)
    position: int | None  #: 1 for the job the executor will start next; None: not known yet


@dataclass(frozen=True)
class Node:
    """A machine of a queueing executor's cluster, and its GPUs."""

    node: str
    gpus: int
    gpus_allocated: int
    gpus_free: int  #: neither allocated nor on a node that takes no jobs (down, drained)
    state: str  #: the executor's word (`idle`, `mixed`, `allocated`, `down`, `drained`...)


class Cluster(Protocol):
    """The machines of an executor with a queue of its own, as the API lists them."""

    def nodes(self) -> list[Node]:
        """The machines with GPUs that gpuq's jobs may run on."""


class QueueingExecutor(Executor, Protocol):
    """An executor with a queue of its own (Slurm). gpuq hands it every admitted job at
    once (`start`), with its priority, hold and dependencies; the executor decides where
    and when each runs, and gpuq follows (`waiting`, `started`)."""

    def waiting(self) -> dict[int, Waiting]:
        """The handed-over jobs that have not started, by job id."""

    def started(self) -> list[int]:
        """The handed-over jobs that started since the last call, each once."""

    def follow(self, job_id: int, *, held: bool, priority: int, after: tuple[str, ...]) -> None:
        """Brings a waiting job's hold, priority and dependencies up to date (no call to
        the executor when nothing changed)."""

    def withdraw(self, job_id: int) -> None:
        """Takes back a job that gpuq ended before it started (cancelled while queued)."""

    def nodes(self) -> list[Node]:
        """The machines with GPUs that gpuq's jobs may run on."""
