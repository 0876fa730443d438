"""Turning job changes into pending deliveries, inside a write transaction.

The notifier calls `queue_changes` for state changes; other rules (the idle rule) call
`queue_event` with events of their own. Sending is `delivery`'s business.
"""

from sqlmodel import Session, col, or_, select
from sqlmodel.sql.expression import SelectOfScalar

from gpuq.contract.states import JobStatus, Reason
from service.jobs.reads import highest_revision
from service.public import JobPublic
from service.store.db import utcnow
from service.store.tables import Job, WebhookDelivery
from service.webhooks.owners import owner_webhook

#: Jobs looked at per write transaction.
BATCH = 100


def queue_event(session: Session, job: Job, event: str) -> None:
    """Queues a delivery of `event` about `job` (its row as it is in `session` now) to the
    job's webhook, due at once; nothing if the job has none. Commits with the caller's
    write transaction: a rolled-back change notifies no one."""
    if job.webhook_url is None:
        return
    # The row as it is now, whether the caller changed it through the ORM or an UPDATE.
    session.flush()
    job = session.get(Job, job.id, populate_existing=True) or job
    assert job.id is not None and job.webhook_url is not None
    owner_webhook(session, job.owner)  # the secret exists before anything is sent
    now = utcnow()
    delivery = WebhookDelivery(
        job_id=job.id, owner=job.owner, event=event, url=job.webhook_url, body={}, next_at=now
    )
    session.add(delivery)
    session.flush()  # its id goes into the body
    delivery.body = {
        "event": event,
        "delivery": delivery.id,
        "at": now.isoformat(),
        "job": JobPublic.of(job).model_dump(mode="json"),
    }
    session.add(delivery)


def _unnotified(since: int) -> SelectOfScalar[Job]:
    return (
        select(Job)
        .where(
            col(Job.rev) > since,
            col(Job.webhook_url).isnot(None),
            or_(col(Job.notified_status).is_(None), col(Job.notified_status) != col(Job.status)),
        )
        .order_by(col(Job.rev))
        .limit(BATCH)
    )


def has_changes(session: Session, since: int) -> bool:
    """Whether a job changed after revision `since` may need a delivery (a cheap read)."""
    return session.exec(_unnotified(since).limit(1)).first() is not None


def _event(job: Job) -> str:
    """The event a job's new status is announced as: `preempted` for a job queued again
    because a more urgent one took its GPUs, else the status."""
    last = job.previous_attempts[-1] if job.previous_attempts else {}
    if job.status == JobStatus.queued and last.get("reason") == Reason.preempted:
        return "preempted"
    return job.status.value


def queue_changes(session: Session, since: int) -> tuple[int, bool]:
    """Queues a delivery for each job with a webhook whose status changed since its last
    one (at most `BATCH` jobs) and moves its cursor, `notified_status`, to that status.

    A job's first `queued` is not announced (its owner just submitted it), but a queued
    job that ran before (a retry) is, and one preempted is announced as `preempted`. A job
    that passes through several states between two looks is announced once, in the state it
    has then; final states stay, so they are never missed. Returns the revision to look
    after next time, and whether more may wait.
    """
    top = highest_revision(session.connection())
    jobs = session.exec(_unnotified(since)).all()
    last = jobs[-1].rev if jobs else top  # before our own updates give them new revisions
    for job in jobs:
        first_queued = job.status == JobStatus.queued and job.notified_status is None
        if not first_queued:
            queue_event(session, job, _event(job))
        job.notified_status = job.status.value
        session.add(job)
    if len(jobs) == BATCH:
        return last, True
    return top, False
