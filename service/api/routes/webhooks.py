"""`/v1/webhook`: your default webhook and signing secret; `/v1/jobs/{id}/webhooks`: how a
job's notifications went."""

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from gpuq.contract.spec import WebUrl
from service import webhooks
from service.addresses import AllowList
from service.api.deps import CallerDep, JobId, ServiceDep
from service.api.errors import documented
from service.public import WebhookDeliveryList, WebhookDeliveryPublic, WebhookPublic

router = APIRouter(tags=["webhooks"], responses=documented(400, 401, 413))


class WebhookChange(BaseModel):
    """A change to your webhook; a field left out stays as it is."""

    model_config = ConfigDict(extra="forbid", strict=True)
    url: WebUrl | None = Field(
        None, description="Default webhook for jobs whose spec names none; null removes it."
    )
    rotate_secret: bool = Field(
        False, description="Replace the secret; deliveries not yet sent use the new one."
    )


@router.get("/v1/webhook")
def get_webhook(service: ServiceDep, caller: CallerDep) -> WebhookPublic:
    """Your default webhook and the secret your jobs' deliveries are signed with (made on
    the first ask)."""
    return WebhookPublic.model_validate(webhooks.read_webhook(service.db, caller).model_dump())


@router.put("/v1/webhook")
def put_webhook(change: WebhookChange, service: ServiceDep, caller: CallerDep) -> WebhookPublic:
    """Sets or clears your default webhook, or rotates your secret. Jobs already submitted
    keep the webhook they were given. 422 for a URL naming an internal address (loopback,
    private, link-local...) that GPUQ_WEBHOOK_ALLOW does not allow."""
    url = change.url if "url" in change.model_fields_set else webhooks.Keep.url
    allow = AllowList.parse(service.settings.webhook_allow)
    row = webhooks.change_webhook(
        service.db, caller, url=url, rotate_secret=change.rotate_secret, allow=allow
    )
    return WebhookPublic.model_validate(row.model_dump())


@router.get("/v1/jobs/{job_id}/webhooks", responses=documented(403, 404))
def job_webhooks(job_id: JobId, service: ServiceDep, caller: CallerDep) -> WebhookDeliveryList:
    """A job's webhook deliveries, newest first, with every attempt. Owner or admin."""
    rows = webhooks.job_deliveries(service.db, job_id, caller)
    return WebhookDeliveryList(
        job_id=job_id,
        deliveries=[WebhookDeliveryPublic.model_validate(r.model_dump()) for r in rows],
    )
