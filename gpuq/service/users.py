"""Team members and their bearer tokens. Only a token's SHA-256 is stored."""

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from sqlmodel import col, select

from gpuq.service.audit import record
from gpuq.service.db import Database, utcnow
from gpuq.service.errors import Conflict, Invalid, NotFound, Unauthorized
from gpuq.service.tables import User

TOKEN_PREFIX = "gpuq_"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"


@dataclass(frozen=True)
class Caller:
    """Who a request comes from."""

    name: str
    admin: bool


#: Every caller while no user exists (open mode, loopback only).
OPEN = Caller(name="anonymous", admin=True)
#: The scheduler, in the audit log.
SCHEDULER = Caller(name="scheduler", admin=True)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def add_user(db: Database, name: str, *, admin: bool = False, actor: Caller = OPEN) -> str:
    """Creates `name` (or re-enables a revoked one) and returns its new token, once."""
    if not re.match(NAME_PATTERN, name):
        raise Invalid(("name",), "use 1-64 letters, digits, '.', '_' or '-', starting alphanumeric")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with db.write() as session:
        user = session.exec(select(User).where(User.name == name)).first()
        if user is not None and user.revoked_at is None:
            raise Conflict(f"user {name!r} already exists; revoke it first to issue a new token")
        user = user or User(name=name, token_sha256="")
        user.token_sha256, user.admin, user.revoked_at = digest(token), admin, None
        session.add(user)
        record(session, actor.name, "user_add", f"user/{name}", admin=admin)
    return token


def revoke_user(db: Database, name: str, *, actor: Caller = OPEN) -> None:
    with db.write() as session:
        user = session.exec(select(User).where(User.name == name)).first()
        if user is None or user.revoked_at is not None:
            raise NotFound(f"no active user {name!r}")
        user.revoked_at = utcnow()
        session.add(user)
        record(session, actor.name, "user_revoke", f"user/{name}")


def list_users(db: Database) -> list[User]:
    with db.read() as session:
        return list(session.exec(select(User).order_by(col(User.name))).all())


def active_users(db: Database) -> list[tuple[str, str, bool]]:
    """(token SHA-256, name, admin) of every user not revoked; a Core query, as every
    request needs it after any commit."""
    query = select(User.token_sha256, User.name, User.admin).where(col(User.revoked_at).is_(None))
    with db.reader.connect() as conn:
        return [(row[0], row[1], row[2]) for row in conn.execute(query)]


def authenticate(db: Database, authorization: str | None) -> Caller:
    """The caller behind an `Authorization` header; anyone while no user exists.

    Every request asks this, so the active users are read again only after a commit."""
    users = db.cached("active_users", lambda: active_users(db))
    if not users:
        return OPEN
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("send `Authorization: Bearer <token>` (from `gpuq users add`)")
    given = digest(token.strip())
    found = None
    for token_sha256, name, admin in users:  # every hash is compared: timing says nothing
        if hmac.compare_digest(token_sha256, given):
            found = Caller(name=name, admin=admin)
    if found is None:
        raise Unauthorized("unknown or revoked token")
    return found
