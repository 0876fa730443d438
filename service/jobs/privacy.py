"""What a member sees of someone else's job: the one rule, for every way a job leaves the
API (reads, long polls, the event stream, the dashboard and the CLI, which read those).

Its owner and admins see everything. Others never see its webhook URL (it may embed a
token, as Slack's do). Under GPUQ_RUN_AS=owner a job's run is its owner's alone, as its
files on disk are, so others also miss what the run said: its log lines (`log_tail`), its
own words in `message` and in a retry's `wait_reason` (an exception, a log line, the frame a
crash ended in), and its spec's `command.env` and `idle_exempt` reason (and a sweep
member's parameters that set `command.env`). They keep its state, reason, resources,
placement, progress and metrics. Each field left out is named in `hidden`. Under `service`
every job runs as one account and can read the others' files anyway.

A sweep is seen by the same rule as its members (`sweep_as_seen_by`, `curves_as_seen_by`).

Webhook deliveries carry the whole job: they go to the job's own webhook, the owner's.
"""

from typing import Any, TypeVar

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import Reason
from service.public import JobEvent, JobPublic, SweepCurves, SweepPublic, SweepSummary
from service.settings import Settings
from service.team.users import Caller

J = TypeVar("J", bound=JobEvent)
S = TypeVar("S", bound=SweepSummary)
Spec = TypeVar("Spec", bound=JobSpec)

#: Reasons whose `message` is gpuq's own words alone, never the job's (`outcome.classify`
#: keeps it so; a node it names is a host name, as the job's `nodes` show it to all).
OWN_WORDS = frozenset(
    {
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
    # gpuq's training process says how (its `failed` event): the job's words.
    Reason.host_oom: "ran out of host memory",
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
    "params",
    "spec.command.env",
    "spec.idle_exempt",
    "spec.webhook",
)
#: What others may miss of a sweep, as named in its `hidden`.
SWEEP_PRIVATE = (
    "members.message",
    "members.params",
    "best.params",
    "spec.command.env",
    "spec.idle_exempt",
    "spec.sweep.parameters",
    "spec.sweep.points",
    "spec.webhook",
)
#: A sweep parameter that sets a variable of the job's environment: as private as `env`.
ENV_PARAM = "command.env."


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


def _at(item: Any, path: str) -> Any:
    """The value at a dotted `path` of `item` (a job, a sweep); None where a part is
    missing, a list of values through a list."""
    value: Any = item
    for name in path.split("."):
        if isinstance(value, list):
            value = [getattr(each, name, None) for each in value]
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
    spec = _spec(job.spec, private=private)
    if not private:
        return {"spec": spec}
    attempts = [
        a.model_copy(update={"message": public_message(a.reason, a.message)})
        for a in job.previous_attempts
    ]
    params = None if job.params is None else _without_env(job.params)
    return {"spec": spec, "log_tail": [], "previous_attempts": attempts, "params": params}


def _spec(spec: Spec, *, private: bool) -> Spec:
    """A job's (or a sweep's) spec as others see it: never its webhook; under
    GPUQ_RUN_AS=owner, not its `command.env` nor its `idle_exempt` reason either."""
    update: dict[str, Any] = {"webhook": None}
    if private:
        update["idle_exempt"] = None
        if spec.command is not None and spec.command.env:
            update["command"] = spec.command.model_copy(update={"env": {}})
    return spec.model_copy(update=update)


def _without_env(params: dict[str, Any]) -> dict[str, Any]:
    """A sweep member's parameters but those that set its environment (`command.env.X`)."""
    return {name: value for name, value in params.items() if not name.startswith(ENV_PARAM)}


def sweep_as_seen_by(caller: Caller, sweep: S, settings: Settings) -> S:
    """A sweep (a `SweepSummary` or a `SweepPublic`) as `caller` may see it, by the same
    rule as its members: whole for its owner and admins; for others never its spec's
    webhook and, under GPUQ_RUN_AS=owner, neither its `command.env`, its `idle_exempt`
    reason, the parameters that set `command.env`, nor its members' own words; listed in
    `hidden`."""
    if caller.manages(sweep.owner):
        return sweep
    private = settings.run_as == "owner"
    spec = _spec(sweep.spec, private=private)
    if private:
        section = spec.sweep
        parameters = _without_env(section.parameters)
        points = [_without_env(point) for point in section.points]
        spec = spec.model_copy(
            update={
                "sweep": section.model_copy(update={"parameters": parameters, "points": points})
            }
        )
    update: dict[str, Any] = {"spec": spec}
    if private and isinstance(sweep, SweepPublic):
        update["members"] = [
            m.model_copy(
                update={
                    "message": public_message(m.reason, m.message),
                    "params": _without_env(m.params),
                }
            )
            for m in sweep.members
        ]
        if sweep.best is not None:
            update["best"] = sweep.best.model_copy(
                update={"params": _without_env(sweep.best.params)}
            )
    seen = sweep.model_copy(update=update)
    hidden = [path for path in SWEEP_PRIVATE if _at(seen, path) != _at(sweep, path)]
    return seen.model_copy(update={"hidden": hidden}) if hidden else sweep


def curves_as_seen_by(
    caller: Caller, owner: str, curves: SweepCurves, settings: Settings
) -> SweepCurves:
    """A sweep's curves as `caller` may see them: its members' parameters without those
    that set `command.env` unless `caller` manages the sweep's `owner` (GPUQ_RUN_AS=owner)."""
    if caller.manages(owner) or settings.run_as != "owner":
        return curves
    members = [m.model_copy(update={"params": _without_env(m.params)}) for m in curves.members]
    return curves.model_copy(update={"members": members})
