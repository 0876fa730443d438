"""The job lifecycle: states, why a job ended, and which transitions are allowed."""

from enum import StrEnum


class JobStatus(StrEnum):
    queued = "queued"  #: accepted, waiting for GPUs
    starting = "starting"  #: launched; TensorFlow is initialising
    running = "running"  #: the first training step was reported
    succeeded = "succeeded"  #: exited 0
    failed = "failed"  #: ended for a `reason` other than the user's or the clock's
    cancelled = "cancelled"  #: stopped at a user's request
    timed_out = "timed_out"  #: stopped by its `time_limit_s`


class Reason(StrEnum):
    nonzero_exit = "nonzero_exit"
    signal = "signal"
    gpu_oom = "gpu_oom"
    host_oom = "host_oom"
    memory_cap_exceeded = "memory_cap_exceeded"
    placement_violation = "placement_violation"  #: used a GPU it was not given
    worker_lost = "worker_lost"
    invalid_spec = "invalid_spec"
    launch_error = "launch_error"
    device_mismatch = "device_mismatch"
    cancelled_by_user = "cancelled_by_user"
    dependency_failed = "dependency_failed"
    time_limit = "time_limit"
    idle = "idle"  #: held its GPUs without training (the idle rule, a hung step)
    terminal_closed = "terminal_closed"  #: a session's terminal went away, ending it
    early_stopped = "early_stopped"  #: its sweep's stopping rule found it hopeless
    #: an attempt stopped for a more urgent job; the job was queued again to resume (only
    #: ever an earlier attempt's reason: the job itself never ends preempted)
    preempted = "preempted"


TERMINAL = frozenset(
    {JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled, JobStatus.timed_out}
)
ACTIVE = frozenset({JobStatus.starting, JobStatus.running})

#: target state -> the states it may be reached from
ALLOWED_FROM: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.queued: ACTIVE,  # a failed attempt with retries left is queued again
    JobStatus.starting: frozenset({JobStatus.queued}),
    JobStatus.running: frozenset({JobStatus.starting}),
    JobStatus.succeeded: ACTIVE,
    JobStatus.failed: ACTIVE | {JobStatus.queued},
    JobStatus.cancelled: ACTIVE | {JobStatus.queued},
    JobStatus.timed_out: ACTIVE,
}


class GpuState(StrEnum):
    """A GPU's state, as the API shows it (`service.gpus.states` has its transitions)."""

    free = "free"  #: may be placed on (shown as `in_use` while jobs hold allocations)
    in_use = "in_use"  #: never stored: a free GPU that jobs are placed on
    draining = "draining"  #: a job ended here; waiting for its processes and memory to go
    quarantined = "quarantined"  #: they did not go in time; an admin must release it
