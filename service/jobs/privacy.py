"""What a member sees of someone else's job: the one rule, for every way a job leaves the
API (reads, long polls, the event stream, the dashboard and the CLI, which read those).

Its owner and admins see everything. Others never see its webhook URL (it may embed a
token, as Slack's do). Under GPUQ_RUN_AS=owner a job's run is its owner's alone, as its
files on disk are, so others also miss what the run said: its log lines (`log_tail`), its
own words in `message` and in a retry's `wait_reason` (an exception, a log line, the frame a
crash ended in), and its spec's `command.env` and `idle_exempt` reason. They keep its state,
reason, resources, placement, progress and metrics. Each field left out is named in
`hidden`. Under `service` every job runs as one account and can read the others' files
anyway.

Webhook deliveries carry the whole job: they go to the job's own webhook, the owner's.
"""

from typing import Any, TypeVar

from gpuq.contract.states import Reason
from service.public import JobEvent, JobPublic, SweepPublic, SweepSummary
from service.settings import Settings
from service.team.users import Caller

J = TypeVar("J", bound=JobEvent)
S = TypeVar("S", bound=SweepSummary)

#: Reasons whose `message` is gpuq's own words alone, never the job's.
OWN_WORDS = frozenset(
    {
        Reason.host_oom,
        Reason.worker_lost,
        Reason.cancelled_by_user,
        Reason.dependency_failed,
        Reason.time_limit,
        Reason.terminal_closed,
        Reason.early_stopped,
        Reason.preempted,
    }
)
#: What the other reasons' messages say in gpuq's words: they may quote the job itself
#: (its `failed` event, a log line, its program's launch error).
MEANING = {
    Reason.nonzero_exit: "exited with a non-zero code",
    # A crash names the frame its stack in the log ends in: a path of the job's.
    Reason.signal: "was ended by a signal (see exit_signal)",
    Reason.gpu_oom: "ran out of GPU memory",
    Reason.memory_cap_exceeded: "went over its GPU memory cap",
    Reason.placement_violation: "used a GPU it was not given",
    Reason.invalid_spec: "its spec or its data could not be used",
    Reason.launch_error: "its program could not be started",
    Reason.device_mismatch: "it saw other devices than the GPUs it was given",
    Reason.idle: "held its GPUs without training",
}


#: What others may miss of a job, as named in its `hidden`.
PRIVATE = (
    "message",
    "wait_reason",
    "log_tail",
    "previous_attempts.message",
    "spec.command.env",
    "spec.idle_exempt",
    "spec.webhook",
)


def as_seen_by(caller: Caller, job: J, settings: Settings) -> J:
    """`job` (a `JobPublic` or a `JobEvent`) as `caller` may see it: whole for its owner and
    admins; for others without what the module's docstring names, listed in `hidden`."""
    if caller.manages(job.owner):
        return job
    private = settings.run_as == "owner"
    update: dict[str, Any] = {}
    if private:
        update["message"] = public_message(job.reason, job.message)
        update["wait_reason"] = _retry_without_words(job.wait_reason)
    if isinstance(job, JobPublic):
        update.update(_details(job, private=private))
    seen = job.model_copy(update=update)
    hidden = [path for path in PRIVATE if _at(seen, path) != _at(job, path)]
    return seen.model_copy(update={"hidden": hidden}) if hidden else job


def _at(job: JobEvent, path: str) -> Any:
    """The value at a dotted `path` of `job`; None where a part is missing, a list of
    values through a list."""
    value: Any = job
    for name in path.split("."):
        if isinstance(value, list):
            value = [getattr(item, name, None) for item in value]
        else:
            value = getattr(value, name, None)
    return value


def public_message(reason: Reason | None, message: str | None) -> str | None:
    """A job's `message` without its own words: kept where gpuq wrote all of it, the
    reason's meaning otherwise, and nothing before the job ended (the job's last words)."""
    if message is None or reason in OWN_WORDS:
        return message
    if reason is None:
        return None
    return MEANING[reason]


def _retry_without_words(wait_reason: str | None) -> str | None:
    """A retry's wait reason without the failed attempt's message: `writes.requeue`'s
    `retrying in 5 s: attempt 1 failed (nonzero_exit: ...)` ends `failed (nonzero_exit)`."""
    if wait_reason is None or not wait_reason.startswith("retrying in "):
        return wait_reason
    head, _, tail = wait_reason.partition(" (")
    reason, colon, _ = tail.partition(": ")
    return f"{head} ({reason})" if colon else head


def _details(job: JobPublic, *, private: bool) -> dict[str, Any]:
    """The fields only a `JobPublic` has, as others see them."""
    spec = job.spec.model_copy(update={"webhook": None})
    if not private:
        return {"spec": spec}
    if spec.command is not None and spec.command.env:
        spec = spec.model_copy(update={"command": spec.command.model_copy(update={"env": {}})})
    attempts = [
        a.model_copy(update={"message": public_message(a.reason, a.message)})
        for a in job.previous_attempts
    ]
    return {
        "spec": spec.model_copy(update={"idle_exempt": None}),
        "log_tail": [],
        "previous_attempts": attempts,
    }


def sweep_as_seen_by(caller: Caller, sweep: S, settings: Settings) -> S:
    """A sweep as `caller` may see it, by the same rule as its members: whole for its owner
    and admins; for others without its spec's webhook and, under GPUQ_RUN_AS=owner, without
    its `command.env` and its members' own words."""
    if caller.manages(sweep.owner):
        return sweep
    private = settings.run_as == "owner"
    spec = sweep.spec.model_copy(update={"webhook": None})
    if private and spec.command is not None:
        spec = spec.model_copy(update={"command": spec.command.model_copy(update={"env": {}})})
    update: dict[str, Any] = {"spec": spec}
    if private and isinstance(sweep, SweepPublic):
        update["members"] = [
            m.model_copy(update={"message": public_message(m.reason, m.message)})
            for m in sweep.members
        ]
    return sweep.model_copy(update=update)
