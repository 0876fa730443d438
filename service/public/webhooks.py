"""A user's webhook and a job's webhook deliveries as the API shows them."""

from datetime import datetime

from pydantic import BaseModel

from service.usage.public import described


class WebhookPublic(BaseModel):
    url: str | None = described("Your default webhook, for jobs whose spec names none; null: none.")
    secret: str = described(
        "Signs every delivery to your jobs' webhooks: `X-Gpuq-Signature: sha256=<hex>` is "
        "HMAC-SHA256 of the body with this key."
    )


class DeliveryAttemptPublic(BaseModel):
    at: datetime = described("When the POST was sent (UTC).")
    status_code: int | None = described("The receiver's HTTP status; null if none came.")
    error: str | None = described(
        "Why no answer came, coarsely: `could not connect`, `timed out`, `no answer`, or "
        "`refused: address not allowed (GPUQ_WEBHOOK_ALLOW)`."
    )
    duration_ms: int | None = described(
        "How long the answer took, in milliseconds; null if none came."
    )


class WebhookDeliveryPublic(BaseModel):
    id: int = described("The delivery's id, also sent as `X-Gpuq-Delivery`.")
    event: str = described("The job's new status (`running`, `succeeded`, ...) or `idle`.")
    url: str = described("Where it is posted.")
    state: str = described("`pending` (to be tried), `delivered` (a 2xx answer) or `failed`.")
    attempts: list[DeliveryAttemptPublic] = described("Each try, oldest first.")
    next_at: datetime | None = described("When the next try is due (UTC); null unless pending.")
    created_at: datetime = described("When the change was noticed (UTC).")
    finished_at: datetime | None = described("When it was delivered or given up (UTC).")


class WebhookDeliveryList(BaseModel):
    job_id: int = described("The job.")
    deliveries: list[WebhookDeliveryPublic] = described("The newest (at most 200), newest first.")
