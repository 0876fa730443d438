"""Slurm's job states, and what each means to gpuq.

Only a state's first word counts (`CANCELLED by 0`). `exit.json` stays the authority on
how a job ended; a `Verdict` only says what the runner could not know: that Slurm itself
ended the job (its time limit, a failed node, the OOM killer, preemption), or that the
runner never started.
"""

from enum import Enum

from gpuq.contract.states import JobStatus, Reason
from service.executors.base import Verdict


class Phase(Enum):
    waiting = "waiting"
    running = "running"
    ended = "ended"


WAITING = frozenset({"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD"})
RUNNING = frozenset(
    {
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",  # the batch step ended; Slurm is cleaning up
        "SUSPENDED",
        "STOPPED",
        "SIGNALING",
        "RESIZING",
        "STAGE_OUT",
    }
)


def first_word(state: str) -> str:
    """`CANCELLED by 0` → `CANCELLED`; `RUNNING` → `RUNNING`."""
    return state.split()[0].rstrip("+").upper() if state.strip() else ""


def phase(state: str) -> Phase:
    word = first_word(state)
    if word in WAITING:
        return Phase.waiting
    if word in RUNNING:
        return Phase.running
    return Phase.ended


#: Slurm's endings the runner cannot know of: first word → status, reason, words
ENDINGS: dict[str, tuple[JobStatus, Reason | None, str]] = {
    "TIMEOUT": (JobStatus.timed_out, Reason.time_limit, "Slurm ended job {id} at its time limit"),
    "DEADLINE": (JobStatus.timed_out, Reason.time_limit, "Slurm ended job {id} at its deadline"),
    "OUT_OF_MEMORY": (
        JobStatus.failed,
        Reason.host_oom,
        "Slurm ended job {id} out of host memory; lower batch_size or use a smaller data set",
    ),
    "NODE_FAIL": (
        JobStatus.failed,
        Reason.worker_lost,
        "job {id}'s node failed; it is tried again if retries are left",
    ),
    "BOOT_FAIL": (
        JobStatus.failed,
        Reason.worker_lost,
        "job {id}'s node failed to boot; it is tried again if retries are left",
    ),
    "PREEMPTED": (
        JobStatus.queued,
        Reason.preempted,
        "Slurm preempted job {id}; a new attempt resumes from its checkpoint",
    ),
    "CANCELLED": (
        JobStatus.cancelled,
        Reason.cancelled_by_user,
        "Slurm job {id} was cancelled in Slurm (scancel or an administrator), not through gpuq",
    ),
}


def verdict(state: str | None, *, has_exit_record: bool, slurm_id: str) -> Verdict | None:
    """What Slurm's final `state` says beyond the runner's `exit.json` (None: nothing;
    `state` None: Slurm no longer knows the job)."""
    word = first_word(state) if state else None
    if word is None and not has_exit_record:
        return Verdict(
            JobStatus.failed,
            Reason.worker_lost,
            f"Slurm no longer knows job {slurm_id} and its runner left no exit record: "
            "the node may have failed or the job was purged while gpuq was down",
        )
    if word in ENDINGS:
        status, reason, words = ENDINGS[word]
        return Verdict(status, reason, words.format(id=slurm_id))
    if word is not None and not has_exit_record:
        return Verdict(
            JobStatus.failed,
            Reason.launch_error,
            f"Slurm job {slurm_id} ended ({word}) before gpuq's runner wrote anything: see "
            "output.log; is gpuq installed at GPUQ_SLURM_PYTHON on the node, and is "
            "GPUQ_HOME on a filesystem the nodes share?",
        )
    return None
