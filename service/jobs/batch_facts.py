"""What the database says about a batch of submissions, read once for all of it in a few
queries, whatever its size: jobs by idempotency key, the states of the jobs it depends on,
queued jobs per owner with a quota, owners' default webhooks."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Table, bindparam, func, select

from gpuq.contract.states import JobStatus
from service.jobs.submission import Submission
from service.store.tables import Job, UserWebhook

JOB: Table = Job.__table__  # type: ignore[attr-defined]
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


@dataclass(frozen=True)
class Facts:
    """What the database says about a batch, read once for all of it."""

    by_key: Mapping[str, Mapping[str, Any]]  #: jobs by stored idempotency key
    statuses: Mapping[int, str]  #: the status of each job the batch depends on
    queued: Mapping[str, int]  #: queued jobs per owner with a quota
    webhooks: Mapping[str, str | None]  #: owners' default webhooks


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
