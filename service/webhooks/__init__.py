"""Webhooks: each job's state changes (and events such as `idle`) POSTed as JSON to the
job's webhook, signed with its owner's secret, retried with back-off, every attempt kept
for the owner to read.

`queue` stores deliveries in a write transaction: the notifier's, soon after a state
change, or the caller's own for other events (the idle rule's); the `notifier` thread
sends them (`delivery`) through a client (`transport`) that connects only where
`addresses` allows: public addresses, and what GPUQ_WEBHOOK_ALLOW adds; `owners` keeps
each owner's default URL and secret (`service.jobs.privacy` hides a job's webhook URL
from other users). Delivery is at least
once (a crash mid-send sends again): receivers drop repeats by `X-Gpuq-Delivery`.
"""

from service.webhooks.notifier import Notifier
from service.webhooks.owners import Keep, change_webhook, owner_webhook, read_webhook
from service.webhooks.queue import queue_event
from service.webhooks.reads import job_deliveries
from service.webhooks.signing import sign, verify

__all__ = [
    "Keep",
    "Notifier",
    "change_webhook",
    "job_deliveries",
    "owner_webhook",
    "queue_event",
    "read_webhook",
    "sign",
    "verify",
]
