"""Team members and their bearer tokens. Only a token's SHA-256 is stored."""

import hashlib
import hmac
import os
import pwd
import re
import secrets
from dataclasses import dataclass

from sqlmodel import Session, col, select

from service.errors import Conflict, Forbidden, Invalid, NotFound, Unauthorized
from service.store.db import Database, utcnow
from service.store.tables import User
from service.team import accounts
from service.team.audit import record

TOKEN_PREFIX = "gpuq_"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"


@dataclass(frozen=True)
class Caller:
    """Who a request comes from."""

    name: str
    admin: bool
    #: the Unix account their jobs run as under GPUQ_RUN_AS=owner; None: not bound
    unix_user: str | None = None

    def manages(self, owner: str) -> bool:
        """Whether they may act on, and see everything of, `owner`'s jobs: theirs, or an
        admin's right."""
        return self.admin or self.name == owner


#: Every caller while no user exists (open mode, loopback only).
OPEN = Caller(name="anonymous", admin=True)
#: The scheduler, in the audit log.
SCHEDULER = Caller(name="scheduler", admin=True)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def check_unix_user(login: str) -> str:
    """`login` if it is an account on this box; `Invalid` otherwise."""
    try:
        pwd.getpwnam(login)
    except KeyError:
        raise Invalid(("unix_user",), f"no Unix account {login!r} on this box") from None
    return login


def add_user(
    db: Database,
    name: str,
    *,
    admin: bool = False,
    unix_user: str | None = None,
    actor: Caller = OPEN,
) -> str:
    """Creates `name` (or re-enables a revoked one) and returns its new token, once."""
    if not re.match(NAME_PATTERN, name):
        raise Invalid(("name",), "use 1-64 letters, digits, '.', '_' or '-', starting alphanumeric")
    if unix_user is not None:
        check_unix_user(unix_user)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with db.write() as session:
        user = session.exec(select(User).where(User.name == name)).first()
        if user is not None and user.revoked_at is None:
            raise Conflict(f"user {name!r} already exists; revoke it first to issue a new token")
        _check_unbound(session, unix_user, name)
        user = user or User(name=name, token_sha256="")
        user.token_sha256, user.admin, user.revoked_at = digest(token), admin, None
        user.unix_user = unix_user
        session.add(user)
        record(session, actor.name, "user_add", f"user/{name}", admin=admin, unix_user=unix_user)
    return token


def set_unix_user(db: Database, name: str, unix_user: str | None, *, actor: Caller = OPEN) -> None:
    """Binds `name` to the Unix account `unix_user` (None: unbinds). A job of theirs queued
    with another account no longer starts (`run_as.launch_as`): it is not run as an account
    they were unbound from."""
    if unix_user is not None:
        check_unix_user(unix_user)
    with db.write() as session:
        user = session.exec(select(User).where(User.name == name)).first()
        if user is None or user.revoked_at is not None:
            raise NotFound(f"no active user {name!r}")
        _check_unbound(session, unix_user, name)
        old, user.unix_user = user.unix_user, unix_user
        session.add(user)
        record(session, actor.name, "user_unix", f"user/{name}", old=old, new=unix_user)


def _check_unbound(session: Session, unix_user: str | None, name: str) -> None:
    """One Unix account stands for one gpuq user: a socket login must know whom it is."""
    if unix_user is None:
        return
    taken = session.exec(
        select(User.name).where(
            User.unix_user == unix_user, User.name != name, col(User.revoked_at).is_(None)
        )
    ).first()
    if taken is not None:
        raise Conflict(f"Unix account {unix_user!r} is already bound to user {taken!r}")


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


@dataclass(frozen=True)
class ActiveUser:
    token_sha256: str
    caller: Caller


def active_users(db: Database) -> list[ActiveUser]:
    """Every user not revoked; a Core query, as every request needs it after any commit."""
    query = select(User.token_sha256, User.name, User.admin, User.unix_user).where(
        col(User.revoked_at).is_(None)
    )
    with db.reader.connect() as conn:
        return [
            ActiveUser(row[0], Caller(name=row[1], admin=row[2], unix_user=row[3]))
            for row in conn.execute(query)
        ]


def current_users(db: Database) -> list[ActiveUser]:
    """`active_users`, read again only when a user changed (the `users` revision, which
    triggers raise): every request and every start asks."""
    return db.cached("active_users", lambda: active_users(db), revision="users")


def has_users(db: Database) -> bool:
    """False in open mode (no user yet)."""
    return bool(current_users(db))


def authenticate(db: Database, authorization: str | None) -> Caller:
    """The caller behind an `Authorization` header; anyone while no user exists.

    Every request asks this, so the active users are read again only when one changed."""
    users = current_users(db)
    if not users:
        return OPEN
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized(
            "send `Authorization: Bearer <token>` (from `gpuq users add`), or use the local "
            "socket (GPUQ_SOCKET) as a user bound to your Unix account"
        )
    given = digest(token.strip())
    found = None
    for user in users:  # every hash is compared: timing says nothing
        if hmac.compare_digest(user.token_sha256, given):
            found = user.caller
    if found is None:
        raise Unauthorized("unknown or revoked token")
    return found


def authenticate_peer(db: Database, uid: int) -> Caller:
    """The caller on the local socket, by the kernel's word on its uid: the user bound to
    that account. While no user exists, the account's own name (acting as admin, like any
    caller in open mode; under root, root alone: `check_open_peer`), and its jobs run as
    that account under GPUQ_RUN_AS=owner."""
    try:
        login = pwd.getpwuid(uid).pw_name
    except KeyError:
        raise Unauthorized(f"uid {uid} has no account name on this box") from None
    users = current_users(db)
    if not users:
        check_open_peer(uid)
        return Caller(name=login, admin=True, unix_user=login)
    for user in users:
        if user.caller.unix_user == login:
            return user.caller
    raise Unauthorized(
        f"the Unix account {login!r} (uid {uid}) is bound to no gpuq user; an admin binds it "
        f"with `gpuq users add NAME --unix-user {login}` (or `gpuq users set NAME --unix-user "
        f"{login}`), or send a token"
    )


def check_open_peer(uid: int) -> None:
    """In open mode, `Forbidden` for a caller (a local socket's peer, a loopback TCP
    client's account) other than root (and gpuq's own account, which is root then) where
    gpuq runs as root: any other account would act as
    an admin, on every member's jobs and files and with jobs run as root or as others."""
    if not accounts.running_as_root() or uid in (0, os.geteuid()):
        return
    try:
        login = pwd.getpwuid(uid).pw_name
    except KeyError:
        login = "LOGIN"
    raise Forbidden(
        f"no gpuq user exists yet and gpuq runs as root, so it serves root alone, on its "
        f"local socket and over loopback (uid {uid} would act as an admin): an admin creates "
        f"users as root, "
        f"the first with `gpuq users add NAME --admin`, and binds your account with "
        f"`gpuq users add NAME --unix-user {login}`; then the socket knows you"
    )
