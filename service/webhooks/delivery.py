"""Sending one delivery and recording how it went: delivered on a 2xx answer; anything else
is retried with back-off until the attempts run out."""

import logging
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
from sqlmodel import col, select

from service.store.db import Database, utcnow
from service.store.tables import UserWebhook, WebhookDelivery
from service.webhooks import signing
from service.webhooks.owners import owner_webhook
from service.webhooks.transport import REFUSED, AddressNotAllowed

log = logging.getLogger(__name__)

#: The longest wait between two attempts, however many have failed.
MAX_BACKOFF_S = 300.0
PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
#: An attempt's `error` when no answer came, besides `transport.REFUSED`.
COULD_NOT_CONNECT = "could not connect"  #: refused, unreachable, no such name, TLS, too slow
TIMED_OUT = "timed out"  #: connected, but no answer within GPUQ_WEBHOOK_TIMEOUT_S
NO_ANSWER = "no answer"  #: connected, but the connection broke or the answer was not HTTP


def redelivery_delay_s(failures: int, first_s: float, cap_s: float = MAX_BACKOFF_S) -> float:
    """The wait after the `failures`-th failed attempt (from 1): `first_s`, doubling, at most
    `cap_s`."""
    return min(first_s * 2 ** (failures - 1), cap_s)


def due(db: Database, limit: int, skip: Sequence[int] = ()) -> list[WebhookDelivery]:
    """Pending deliveries whose time has come, oldest first, less those in `skip`."""
    query = (
        select(WebhookDelivery)
        .where(WebhookDelivery.state == PENDING, col(WebhookDelivery.next_at) <= utcnow())
        .order_by(col(WebhookDelivery.next_at), col(WebhookDelivery.id))
        .limit(limit + len(skip))
    )
    with db.read() as session:
        rows = session.exec(query).all()
    return [row for row in rows if row.id not in skip][:limit]


def secret_of(db: Database, owner: str) -> str:
    with db.read() as session:
        row = session.get(UserWebhook, owner)
    if row is not None:
        return row.secret
    with db.write() as session:  # queued by something that did not make it (an old row)
        return owner_webhook(session, owner).secret


def post(http: httpx.Client, delivery: WebhookDelivery, secret: str) -> dict[str, Any]:
    """POSTs `delivery` once, signed with `secret`; the attempt as stored in `attempts`:
    the answer's status and how long it took, or a coarse `failure` without a duration
    (timing would tell a closed port from a filtered one too). The answer's body is never
    read: a receiver cannot keep us with a slow or large one."""
    assert delivery.id is not None
    body = signing.encode(delivery.body)
    headers = signing.headers(delivery.event, delivery.id, signing.sign(secret, body))
    at, began = utcnow(), time.monotonic()
    status_code, error, duration_ms = None, None, None
    try:
        with http.stream("POST", delivery.url, content=body, headers=headers) as response:
            status_code = response.status_code
            duration_ms = round((time.monotonic() - began) * 1000)
    except Exception as exc:  # whatever went wrong, it is one failed attempt, told to the owner
        error = failure(exc)
        # The detail is the admins': the owner could read a port scan in it. The host only:
        # a URL's path or query may hold a token.
        log.info(
            "job %d: webhook delivery %d to %s: %s: %s",
            delivery.job_id,
            delivery.id,
            urlsplit(delivery.url).hostname,
            type(exc).__name__,
            str(exc).replace(delivery.url, "<url>")[:300],
        )
    return {
        "at": at.isoformat(),
        "status_code": status_code,
        "error": error,
        "duration_ms": duration_ms,
    }


def failure(exc: Exception) -> str:
    """What the owner reads about an attempt that got no answer: a coarse class that tells
    a closed port from a filtered one, or TLS trouble from a dead host, to no one."""
    if isinstance(exc, AddressNotAllowed):
        return REFUSED
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return COULD_NOT_CONNECT
    if isinstance(exc, httpx.TimeoutException):
        return TIMED_OUT
    return NO_ANSWER


def record_delivery_attempt(
    db: Database, delivery_id: int, attempt: dict[str, Any], *, attempts: int, backoff_s: float
) -> str:
    """Appends `attempt` and settles the delivery: delivered, failed after `attempts` tries,
    or pending until its next try. Returns its state."""
    code = attempt["status_code"]
    with db.write() as session:
        delivery = session.get(WebhookDelivery, delivery_id)
        if delivery is None or delivery.state != PENDING:
            return delivery.state if delivery else FAILED
        delivery.attempts = [*delivery.attempts, attempt]
        tries = len(delivery.attempts)
        now = utcnow()
        if code is not None and 200 <= code < 300:
            delivery.state, delivery.next_at, delivery.finished_at = DELIVERED, None, now
        elif tries >= attempts:
            delivery.state, delivery.next_at, delivery.finished_at = FAILED, None, now
        else:
            delivery.next_at = now + timedelta(seconds=redelivery_delay_s(tries, backoff_s))
        session.add(delivery)
    if delivery.state != DELIVERED:
        # The host only: a URL's path or query may hold a token.
        log.warning(
            "job %d: webhook delivery %d to %s: %s (attempt %d of %d, now %s)",
            delivery.job_id,
            delivery_id,
            urlsplit(delivery.url).hostname,
            attempt["error"] or f"answered {code}",
            tries,
            attempts,
            delivery.state,
        )
    return delivery.state
