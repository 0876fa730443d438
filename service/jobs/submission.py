"""One job submission as it waits to be stored (`Submission`, made by `submission`), the
per-user `Limits` it is judged by, and its answer, `Stored`."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuq.contract.spec import JobSpec
from service.errors import Forbidden
from service.jobs.host_share import HostShare, ShareDefaults, resolve_share
from service.team.users import Caller


@dataclass(frozen=True)
class Limits:
    """Per-user rules applied at submit (from settings)."""

    max_jobs_queued: int | None = None
    max_user_priority: int = 0


@dataclass(frozen=True)
class Submission:
    """One client's request to store a job, made with `submission`."""

    spec: JobSpec
    caller: Caller
    body: dict[str, Any]  #: the spec as stored
    key: str | None  #: the idempotency key as stored: per owner
    limits: Limits
    sweep_id: int | None = None  #: the sweep it is a member of
    params: Mapping[str, Any] | None = None  #: a sweep member's parameters
    share: HostShare = field(default_factory=HostShare)  #: the cores and host memory it gets


@dataclass(frozen=True)
class Stored:
    """A submission's answer: its job's row, and whether this submission created it."""

    row: Mapping[str, Any]
    created: bool


def submission(
    spec: JobSpec,
    caller: Caller,
    idempotency_key: str | None = None,
    limits: Limits = Limits(),
    defaults: ShareDefaults = ShareDefaults(),
    **member: Any,
) -> Submission:
    """`spec` as `caller` submits it (`member`: a sweep's `sweep_id` and `params`), with
    the cores and host memory it gets (`defaults` where it names none); Forbidden above
    their priority limit."""
    if spec.priority > limits.max_user_priority and not caller.admin:
        raise Forbidden(
            f"priority {spec.priority} is above {limits.max_user_priority}; only an admin may "
            "set it"
        )
    key = None if idempotency_key is None else f"{caller.name}/{idempotency_key}"
    body = spec.model_dump(mode="json")
    share = resolve_share(spec.resources, defaults)
    return Submission(spec, caller, body, key, limits, share=share, **member)
