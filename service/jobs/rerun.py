"""`rerun`: a job's spec, to submit again: the same program, data and settings, and the same
snapshot (so the same code), with the caller's changes merged in (`{"resources": {"gpus":
2}}` changes the GPUs and keeps the rest of `resources`); a sweep member's again with its
parameters (`GPUQ_PARAM_<NAME>`), outside the sweep."""

from typing import Any

from pydantic import ValidationError

from gpuq.contract.spec import JobSpec
from service import jobs
from service.errors import Forbidden, Invalid
from service.store.db import Database
from service.team.users import Caller

#: What a run again never carries over: it waits for nothing and starts when it can.
NOT_AGAIN = ("depends_on", "not_before")


def spec_again(
    db: Database, job_id: int, caller: Caller, changes: dict[str, Any]
) -> tuple[JobSpec, dict[str, Any] | None]:
    """Job `job_id`'s spec with `changes` merged in, for `caller` to submit, and a sweep
    member's parameters: 403 unless it is theirs (or they are an admin), 422 naming the
    field a change makes invalid."""
    job = jobs.read_job(db, job_id)
    if not caller.manages(job["owner"]):
        raise Forbidden(
            f"job {job_id} belongs to {job['owner']}; only its owner or an admin may run it again"
        )
    spec = {k: v for k, v in job["spec"].items() if k not in NOT_AGAIN}
    try:
        return JobSpec.model_validate(merged(spec, changes)), job.get("params")
    except ValidationError as exc:
        error = exc.errors()[0]
        raise Invalid(("body", *error["loc"]), error["msg"]) from None


def merged(spec: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`spec` with `changes` in: objects merged key by key, anything else replaced; a
    change to None removes the key (back to its default)."""
    out = dict(spec)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out
