"""Storing new jobs: a batch of submissions in one write transaction, each judged on its
own and in order (idempotency key, dependencies, quota) as if stored alone, then the
inserts and their audit entries. `submissions.Submissions` batches concurrent clients'."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Connection, Table, bindparam, func, insert, select

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import TERMINAL, JobStatus
from service.errors import Conflict, Forbidden, GpuqError, Invalid, TooMany
from service.store.db import Database, utcnow
from service.store.tables import AuditEntry, Job, UserWebhook
from service.team.users import Caller

JOB: Table = Job.__table__  # type: ignore[attr-defined]
AUDIT: Table = AuditEntry.__table__  # type: ignore[attr-defined]
WEBHOOK: Table = UserWebhook.__table__  # type: ignore[attr-defined]

# Built once: a submission runs each, and building one costs more than running it.
BY_KEY = select(JOB).where(JOB.c.idempotency_key.in_(bindparam("keys", expanding=True)))
STATUSES = select(JOB.c.id, JOB.c.status).where(JOB.c.id.in_(bindparam("ids", expanding=True)))
QUEUED = (
    select(JOB.c.owner, func.count())
    .where(JOB.c.owner.in_(bindparam("owners", expanding=True)))
    .where(JOB.c.status == JobStatus.queued.value)
    .group_by(JOB.c.owner)
)
WEBHOOKS = select(WEBHOOK.c.owner, WEBHOOK.c.url).where(
    WEBHOOK.c.owner.in_(bindparam("owners", expanding=True))
)
#: PostgreSQL: a BEFORE trigger sets the new job's revision in the same write.
INSERT_JOB = insert(JOB).returning(JOB.c.id, JOB.c.rev)
#: SQLite: the insert gives the next revision itself (migration 0016: the AFTER trigger then
#: leaves the row alone, where it would write it again).
NEXT_REV = select(func.coalesce(func.max(JOB.c.rev), 0) + 1).scalar_subquery()
INSERT_JOB_WITH_REV = INSERT_JOB.values(rev=NEXT_REV)
INSERT_AUDIT = insert(AUDIT)


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


@dataclass(frozen=True)
class Stored:
    """A submission's answer: its job's row, and whether this submission created it."""

    row: Mapping[str, Any]
    created: bool


@dataclass(frozen=True)
class Facts:
    """What the database says about a batch, read once for all of it."""

    by_key: Mapping[str, Mapping[str, Any]]  #: jobs by stored idempotency key
    statuses: Mapping[int, str]  #: the status of each job the batch depends on
    queued: Mapping[str, int]  #: queued jobs per owner with a quota
    webhooks: Mapping[str, str | None]  #: owners' default webhooks


@dataclass(frozen=True)
class Create:
    """Verdict: store a new job."""


@dataclass(frozen=True)
class Replay:
    """Verdict: answer with this job, stored before under the same idempotency key."""

    row: Mapping[str, Any]


@dataclass(frozen=True)
class ReplayOf:
    """Verdict: answer with the job an earlier submission of the same batch stores."""

    index: int


Verdict = Create | Replay | ReplayOf | GpuqError


def submission(
    spec: JobSpec,
    caller: Caller,
    idempotency_key: str | None = None,
    limits: Limits = Limits(),
    **member: Any,
) -> Submission:
    """`spec` as `caller` submits it (`member`: a sweep's `sweep_id` and `params`);
    Forbidden above their priority limit."""
    if spec.priority > limits.max_user_priority and not caller.admin:
        raise Forbidden(
            f"priority {spec.priority} is above {limits.max_user_priority}; only an admin may "
            "set it"
        )
    key = None if idempotency_key is None else f"{caller.name}/{idempotency_key}"
    return Submission(spec, caller, spec.model_dump(mode="json"), key, limits, **member)


def create_job(
    db: Database,
    *,
    spec: JobSpec,
    caller: Caller,
    idempotency_key: str | None = None,
    limits: Limits = Limits(),
) -> tuple[Job, bool]:
    """Stores a new queued job owned by `caller` in a transaction of its own; with a known
    `idempotency_key` (per owner), returns the original instead."""
    item = submission(spec, caller, idempotency_key, limits)
    with db.write_connection() as conn:
        (answer,) = store(conn, [item])
        if isinstance(answer, GpuqError):
            raise answer
    return Job.model_validate(answer.row), answer.created


def store(conn: Connection, batch: Sequence[Submission]) -> list[Stored | GpuqError]:
    """Stores what may be stored of `batch` in the caller's write transaction; one answer
    per submission, in order: its job, or its own error."""
    facts = read_facts(conn, batch)
    verdicts = judge(batch, facts)
    creating = [i for i, verdict in enumerate(verdicts) if isinstance(verdict, Create)]
    rows = insert_jobs(conn, [batch[i] for i in creating], facts.webhooks)
    created = dict(zip(creating, rows, strict=True))
    answers: list[Stored | GpuqError] = []
    for index, verdict in enumerate(verdicts):
        match verdict:
            case Create():
                answers.append(Stored(created[index], created=True))
            case Replay(row):
                answers.append(Stored(row, created=False))
            case ReplayOf(original):
                answers.append(Stored(created[original], created=False))
            case GpuqError():
                answers.append(verdict)
    return answers


def read_facts(conn: Connection, batch: Sequence[Submission]) -> Facts:
    """A few queries for the whole batch, whatever its size."""
    keys = {s.key for s in batch if s.key is not None}
    ids = {i for s in batch for i in s.spec.depends_on}
    capped = {s.caller.name for s in batch if s.limits.max_jobs_queued is not None}
    owners = {s.caller.name for s in batch if s.spec.webhook is None}
    by_key: dict[str, Mapping[str, Any]] = {}
    statuses: dict[int, str] = {}
    queued: dict[str, int] = {}
    webhooks: dict[str, str | None] = {}
    if keys:
        found = conn.execute(BY_KEY, {"keys": list(keys)}).mappings()
        by_key = {row["idempotency_key"]: dict(row) for row in found}
    if ids:
        found_ids = conn.execute(STATUSES, {"ids": list(ids)})
        statuses = {job_id: status for job_id, status in found_ids}
    if capped:
        counts = conn.execute(QUEUED, {"owners": list(capped)})
        queued = {owner: count for owner, count in counts}
    if owners:
        urls = conn.execute(WEBHOOKS, {"owners": list(owners)})
        webhooks = {owner: url for owner, url in urls}
    return Facts(by_key, statuses, queued, webhooks)


def judge(batch: Sequence[Submission], facts: Facts) -> list[Verdict]:
    """Each submission's fate, in order, as if each were stored before the next came."""
    verdicts: list[Verdict] = []
    keys: dict[str, int] = {}  # key → the submission of this batch that stores its job
    queued = dict(facts.queued)
    for index, item in enumerate(batch):
        verdict = _replay(item, batch, facts, keys) or _admit(item, facts, queued)
        if isinstance(verdict, Create):
            owner = item.caller.name
            queued[owner] = queued.get(owner, 0) + 1
            if item.key is not None:
                keys[item.key] = index
        verdicts.append(verdict)
    return verdicts


def _replay(
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


def insert_jobs(
    conn: Connection, batch: Sequence[Submission], webhooks: Mapping[str, str | None]
) -> list[dict[str, Any]]:
    """Inserts a queued job per submission, and its audit entry; their rows, in order."""
    if not batch:
        return []
    now = utcnow()
    defaults = _defaults()
    values = [{**defaults, **_values(item, webhooks, now)} for item in batch]
    # One statement per job: SQLite runs a batch row by row anyway, and PostgreSQL's
    # ordered batch form casts each value to its declared type, for `status` an enum type
    # the migrations never made (the column is a VARCHAR). Each row is what was inserted,
    # with the id and revision the database gave it: reading every column back costs more.
    statement = INSERT_JOB_WITH_REV if conn.dialect.name == "sqlite" else INSERT_JOB
    rows = []
    for one in values:
        job_id, rev = conn.execute(statement, one).one()
        rows.append({**one, "id": job_id, "rev": rev})
    conn.execute(INSERT_AUDIT, [_audit_entry(row, now) for row in rows])
    return rows


def _values(item: Submission, webhooks: Mapping[str, str | None], now: datetime) -> dict[str, Any]:
    spec, caller = item.spec, item.caller
    return {
        "name": spec.name,
        "owner": caller.name,
        "priority": spec.priority,
        "spec": item.body,
        "gpu_count": spec.resources.total_gpus,
        "memory_mb": spec.resources.memory_mb if spec.resources.gpu_count else None,
        "idempotency_key": item.key,
        "depends_on": list(spec.depends_on),
        "unix_user": caller.unix_user,
        "not_before": spec.not_before,
        "webhook_url": spec.webhook or webhooks.get(caller.name),
        "created_at": now,
        "sweep_id": item.sweep_id,
        "params": None if item.params is None else dict(item.params),
    }


@cache
def _defaults() -> Mapping[str, Any]:
    """A new job's columns as the model defaults them, but those the database gives (its id
    and revision); shared, so never changed (the insert only reads them)."""
    fields = Job.model_fields.items()
    given = ("id", "rev")
    return {n: f.get_default(call_default_factory=True) for n, f in fields if n not in given}


def _audit_entry(row: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """As `audit.record` writes it for a submission."""
    target = f"job/{row['id']}"
    return {
        "at": now,
        "actor": row["owner"],
        "action": "submit",
        "target": target,
        "detail": {"name": row["name"]},
    }
