"""`gpuq users add|ls|revoke`: on this machine's database itself, no server needed."""

import getpass
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer

from service.cli.options import JsonFlag, print_json
from service.cli.tables import print_rendered, users_table

if TYPE_CHECKING:
    from service.store.db import Database
    from service.team.users import Caller

app = typer.Typer(
    name="users",
    help="Manage users and tokens (on this machine).",
    no_args_is_help=True,
)

NameArg = Annotated[str, typer.Argument(metavar="NAME", help="The user's name.")]
UnixUserOption = Annotated[
    str | None,
    typer.Option(
        "--unix-user",
        metavar="LOGIN",
        help="The Unix account their jobs run as (GPUQ_RUN_AS=owner) and that logs in as "
        "them on the local socket.",
    ),
]


@contextmanager
def _database() -> Iterator["Database"]:
    """The database of `GPUQ_HOME`, schema up to date; a refusal exits 1 with its message."""
    # The server's modules load here, not at import: `gpuq ls` should start fast.
    from service.errors import GpuqError
    from service.settings import Settings
    from service.store import migrate
    from service.store.db import Database

    db = Database.open(Settings().db_url)
    try:
        migrate.upgrade(db)
        yield db
    except GpuqError as exc:
        print(f"gpuq: {exc.message}", file=sys.stderr)
        raise typer.Exit(1) from exc
    finally:
        db.dispose()


def _actor() -> "Caller":
    """Changes made here are audited as the console's login user, acting as admin."""
    from service.team import users

    return users.Caller(name=f"console:{getpass.getuser()}", admin=True)


@app.command("add")
def add(
    name: NameArg,
    admin: Annotated[bool, typer.Option("--admin", help="May act on every job and GPU.")] = False,
    unix_user: UnixUserOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Add a user and print their token once (alone on the last line)."""
    from service.team import users

    with _database() as db:
        token = users.add_user(db, name, admin=admin, unix_user=unix_user, actor=_actor())
    if as_json:
        print_json({"name": name, "admin": admin, "unix_user": unix_user, "token": token})
        return
    role = "an admin" if admin else "a user"
    print(f"added {name} as {role}; this token is shown once, keep it secret:")
    print(token)


@app.command("ls")
def list_users(as_json: JsonFlag = False) -> None:
    """List users (never their tokens)."""
    from service.team import users

    with _database() as db:
        listed = [
            {
                "name": u.name,
                "admin": u.admin,
                "unix_user": u.unix_user,
                "revoked": u.revoked_at is not None,
                "created_at": u.created_at.isoformat(),
            }
            for u in users.list_users(db)
        ]
    if as_json:
        print_json(listed)
    elif listed:
        print_rendered(users_table(listed))
    else:
        print("no users")


@app.command("set")
def set_user(
    name: NameArg,
    unix_user: UnixUserOption = None,
    unbind: Annotated[
        bool, typer.Option("--no-unix-user", help="Bind them to no Unix account.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Change a user's Unix account (queued jobs keep the one they were submitted with)."""
    from service.team import users

    if (unix_user is None) == (not unbind):
        print("gpuq: give --unix-user LOGIN or --no-unix-user", file=sys.stderr)
        raise typer.Exit(2)
    with _database() as db:
        users.set_unix_user(db, name, unix_user, actor=_actor())
    if as_json:
        print_json({"name": name, "unix_user": unix_user})
    elif unix_user is None:
        print(f"{name} is bound to no Unix account")
    else:
        print(f"{name}'s jobs run as the Unix account {unix_user} (under GPUQ_RUN_AS=owner)")


@app.command("revoke")
def revoke(name: NameArg, as_json: JsonFlag = False) -> None:
    """Revoke a user's token."""
    from service.team import users

    with _database() as db:
        users.revoke_user(db, name, actor=_actor())
        left = users.has_users(db)
    if as_json:
        print_json({"name": name, "revoked": True})
    else:
        print(f"revoked {name}; their token no longer works")
    if not left:
        print(
            "gpuq: no user left: gpuq is in open mode (every caller an admin, no token), for "
            "this machine only: its local socket, and loopback if it listens there; from "
            "elsewhere, 403 until `gpuq users add NAME --admin`",
            file=sys.stderr,
        )
