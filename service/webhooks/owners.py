"""Each job owner's default webhook and signing secret (a `UserWebhook` row, made on first
need). Keyed by the owner's name, so open mode's `anonymous` has one too."""

import secrets
from enum import Enum
from urllib.parse import urlsplit

from sqlmodel import Session

from service.addresses import AllowList, check_url
from service.store.db import Database
from service.store.tables import UserWebhook
from service.team.audit import record
from service.team.users import Caller


class Keep(Enum):
    """Left out of `change_webhook`: the URL stays as it is."""

    url = "url"


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def owner_webhook(session: Session, owner: str) -> UserWebhook:
    """`owner`'s row, created with a fresh secret (and no default URL) if there is none;
    call it inside a write transaction."""
    row = session.get(UserWebhook, owner)
    if row is None:
        row = UserWebhook(owner=owner, url=None, secret=new_secret())
        session.add(row)
        session.flush()
    return row


def read_webhook(db: Database, caller: Caller) -> UserWebhook:
    """The caller's default URL and secret; the secret is made on the first ask."""
    with db.read() as session:
        row = session.get(UserWebhook, caller.name)
    if row is not None:
        return row
    with db.write() as session:
        return owner_webhook(session, caller.name)


def change_webhook(
    db: Database,
    caller: Caller,
    *,
    url: str | Keep | None = Keep.url,
    rotate_secret: bool = False,
    allow: AllowList = AllowList(),
) -> UserWebhook:
    """Sets (`url`: a URL) or clears (None) the caller's default webhook, and with
    `rotate_secret` replaces the secret: deliveries not yet sent are signed with the new
    one. Jobs already submitted keep the URL they were given. A URL naming an address that
    neither is public nor is in `allow` is `Invalid`."""
    if isinstance(url, str):
        check_url(url, allow, ("body", "url"))
    with db.write() as session:
        row = owner_webhook(session, caller.name)
        if not isinstance(url, Keep):
            row.url = url
        if rotate_secret:
            row.secret = new_secret()
        session.add(row)
        # Neither the URL (it may embed a token) nor the secret goes into the audit log.
        host = urlsplit(row.url).hostname if row.url else None
        target = f"user/{caller.name}"
        record(session, caller.name, "webhook", target, host=host, rotated=rotate_secret)
        return row
