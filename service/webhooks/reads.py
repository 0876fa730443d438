"""What a job's owner (or an admin) may read about its webhook deliveries."""

from sqlmodel import col, select

from service.errors import Forbidden, NotFound
from service.store.db import Database
from service.store.tables import Job, WebhookDelivery
from service.team.users import Caller

#: The newest deliveries shown for a job.
LIMIT = 200


def job_deliveries(db: Database, job_id: int, caller: Caller) -> list[WebhookDelivery]:
    """The job's deliveries, newest first; 404 for no job, 403 unless owner or admin (a
    delivery names the webhook URL, which may embed a token)."""
    with db.read() as session:
        job = session.get(Job, job_id)
        if job is None:
            raise NotFound(f"job {job_id} not found")
        if not caller.manages(job.owner):
            raise Forbidden(
                f"job {job_id} belongs to {job.owner}; only its owner or an admin may see its "
                "webhook deliveries"
            )
        query = (
            select(WebhookDelivery)
            .where(WebhookDelivery.job_id == job_id)
            .order_by(col(WebhookDelivery.id).desc())
            .limit(LIMIT)
        )
        return list(session.exec(query).all())
