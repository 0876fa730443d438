"""What becomes of each submission of a batch, decided in order as if each were stored
before the next came: a new job (`Create`), the job stored before under the same
idempotency key (`Replay`, `ReplayOf`), or its own error (a conflicting key, a dependency
that can never succeed, the owner's quota)."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuq.contract.states import TERMINAL, JobStatus
from service.errors import Conflict, GpuqError, Invalid, TooMany
from service.jobs.batch_facts import Facts
from service.jobs.submission import Submission


@dataclass(frozen=True)
class Create:
    """Fate: store a new job."""


@dataclass(frozen=True)
class Replay:
    """Fate: answer with this job, stored before under the same idempotency key."""

    row: Mapping[str, Any]


@dataclass(frozen=True)
class ReplayOf:
    """Fate: answer with the job an earlier submission of the same batch stores."""

    index: int


Fate = Create | Replay | ReplayOf | GpuqError


def decide_fates(batch: Sequence[Submission], facts: Facts) -> list[Fate]:
    """Each submission's fate, in order, as if each were stored before the next came."""
    fates: list[Fate] = []
    keys: dict[str, int] = {}  # key → the submission of this batch that stores its job
    queued = dict(facts.queued)
    for index, item in enumerate(batch):
        fate = _stored_before(item, batch, facts, keys) or _admit(item, facts, queued)
        if isinstance(fate, Create):
            owner = item.caller.name
            queued[owner] = queued.get(owner, 0) + 1
            if item.key is not None:
                keys[item.key] = index
        fates.append(fate)
    return fates


def _stored_before(
    item: Submission, batch: Sequence[Submission], facts: Facts, keys: Mapping[str, int]
) -> Replay | ReplayOf | Conflict | None:
    """The job stored before under `item`'s idempotency key, if any."""
    replay: Replay | ReplayOf
    if item.key is None:
        return None
    if item.key in facts.by_key:
        replay = Replay(facts.by_key[item.key])
        original = replay.row["spec"]
    elif item.key in keys:
        replay = ReplayOf(keys[item.key])
        original = batch[replay.index].body
    else:
        return None
    if original != item.body:
        return Conflict("Idempotency-Key was already used with a different job spec")
    return replay


def _admit(item: Submission, facts: Facts, queued: Mapping[str, int]) -> Create | GpuqError:
    """A new job, unless a dependency or the owner's quota forbids it."""
    try:
        _check_dependencies(item.spec.depends_on, facts.statuses)
    except Invalid as exc:
        return exc
    most, owner = item.limits.max_jobs_queued, item.caller.name
    if most is not None and (count := queued.get(owner, 0)) >= most:
        return TooMany(
            f"{owner} already has {count} queued jobs, the most allowed (max_jobs_queued={most})"
        )
    return Create()


def _check_dependencies(ids: Sequence[int], statuses: Mapping[int, str]) -> None:
    for index, job_id in enumerate(ids):
        loc = ("body", "depends_on", index)
        if job_id not in statuses:
            raise Invalid(loc, f"job {job_id} does not exist")
        status = JobStatus(statuses[job_id])
        if status in TERMINAL and status != JobStatus.succeeded:
            raise Invalid(
                loc, f"job {job_id} already ended {status.value}; this job could never start"
            )
