"""Every write to a job row, each a named function, beside the one gate for status.

`transition` (`gate`) is the state machine: a conditional UPDATE whose WHERE clause lists
the allowed predecessors. The other writes change what a job records (its GPUs, progress,
memory, why it was stopped) and never its status but through it. All take the caller's
write session and write with Core statements (no autoflush: flush ORM changes first): the
scheduler makes them for every job it starts, ingests and reaps, where the ORM's
bookkeeping would cost more than the statement. Those it makes take plain values, not `Job`
objects. By the job's life: `queued`, `starts`, `running`, `ends`, and `user_requests`.
"""

from service.jobs.writes.ends import finish, requeue
from service.jobs.writes.gate import ALLOCATION, JOB, JobRow, transition, update_job
from service.jobs.writes.queued import cancel_queued, set_wait_reasons
from service.jobs.writes.running import (
    record_host_usage,
    record_idle,
    record_memory,
    record_placement_violation,
    record_preemption,
    record_progress,
    record_stop,
    record_utilisation,
)
from service.jobs.writes.starts import (
    claim_for_start,
    fail_launch,
    free_allocations,
    mark_started,
    record_handover,
    record_launch,
    unclaim,
)
from service.jobs.writes.user_requests import record_hold, record_priority, request_cancel

__all__ = [
    "ALLOCATION",
    "JOB",
    "JobRow",
    "cancel_queued",
    "claim_for_start",
    "fail_launch",
    "finish",
    "free_allocations",
    "mark_started",
    "record_handover",
    "record_hold",
    "record_host_usage",
    "record_idle",
    "record_launch",
    "record_memory",
    "record_placement_violation",
    "record_preemption",
    "record_priority",
    "record_progress",
    "record_stop",
    "record_utilisation",
    "request_cancel",
    "requeue",
    "set_wait_reasons",
    "transition",
    "unclaim",
    "update_job",
]
