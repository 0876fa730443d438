"""The `gpuq` command: `serve` runs the service; the rest talk to it over HTTP."""

import argparse
import getpass
import ipaddress
import json
import logging
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from service.cli import tables
from service.cli.client import ApiError, Client
from service.cli.watch import watch

SHUTDOWN_GRACE_S = 3


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2))


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from service import migrate, users
    from service.api.app import create_app
    from service.db import Database
    from service.gpus.inventory import InventoryError
    from service.runtime import Service
    from service.scheduler.loop import SchedulerLocked
    from service.settings import Settings

    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    settings = Settings(**overrides)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    db = Database.open(settings.db_url)
    migrate.upgrade(db)
    user_count = len(users.active_users(db))
    db.dispose()
    log = logging.getLogger("gpuq")
    if user_count == 0 and not is_loopback(settings.host) and not args.insecure:
        print(
            f"gpuq: refusing to serve on {settings.host} with no users: anyone who can reach "
            "it could run programs on this machine. Add one with `gpuq users add NAME --admin` "
            "(then send its token), or pass --insecure.",
            file=sys.stderr,
        )
        return 1
    try:
        service = Service.open(settings, schedule=not args.api_only)
    except (InventoryError, SchedulerLocked) as exc:
        print(f"gpuq: {exc}", file=sys.stderr)
        return 1
    if user_count == 0:
        log.warning(
            "NO USERS DEFINED: gpuq is open to every process that can reach %s:%d, acting as "
            "admin. Add users with `gpuq users add NAME [--admin]` to require tokens.",
            settings.host,
            settings.port,
        )
    else:
        log.info("%d user(s): requests need `Authorization: Bearer <token>`", user_count)
    log.info(
        "state in %s, database %s, %d GPU(s)%s; API on http://%s:%d (docs at /docs)",
        settings.home.resolve(),
        settings.db_url,
        len(service.board.inventory.devices),
        " (simulated)" if service.board.inventory.simulated else "",
        settings.host,
        settings.port,
    )
    try:
        uvicorn.run(
            create_app(settings, service),
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level.lower(),
            # Event streams and followed logs never end on their own; without a bound,
            # one open `curl -N` would keep a stopping server up forever.
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        )
    finally:
        service.close()
    return 0


class _SpecLoader(yaml.SafeLoader):
    """YAML 1.1 reads `1e-3` as a string; specs mean a number, as JSON and YAML 1.2 do."""


_SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cmd_users(args: argparse.Namespace) -> int:
    """`gpuq users add|ls|revoke`: on the database itself, no server needed."""
    from service import migrate, users
    from service.db import Database
    from service.errors import GpuqError
    from service.settings import Settings

    db = Database.open(Settings().db_url)
    migrate.upgrade(db)
    actor = users.Caller(name=f"console:{getpass.getuser()}", admin=True)
    try:
        if args.action == "add":
            token = users.add_user(db, args.name, admin=args.admin, actor=actor)
            role = "an admin" if args.admin else "a user"
            if args.json:
                _print_json({"name": args.name, "admin": args.admin, "token": token})
                return 0
            print(f"added {args.name} as {role}; this token is shown once, keep it secret:")
            print(token)
        elif args.action == "revoke":
            users.revoke_user(db, args.name, actor=actor)
            if args.json:
                _print_json({"name": args.name, "revoked": True})
                return 0
            print(f"revoked {args.name}; their token no longer works")
        else:
            listed: list[dict[str, Any]] = [
                {
                    "name": u.name,
                    "admin": u.admin,
                    "revoked": u.revoked_at is not None,
                    "created_at": u.created_at.isoformat(),
                }
                for u in users.list_users(db)
            ]
            if args.json:
                _print_json(listed)
                return 0
            rows = [
                (
                    u["name"],
                    "admin" if u["admin"] else "user",
                    "revoked" if u["revoked"] else "active",
                    u["created_at"][:16].replace("T", " "),
                )
                for u in listed
            ]
            print(tables.table(["NAME", "ROLE", "STATE", "ADDED"], rows) if rows else "no users")
    except GpuqError as exc:
        print(f"gpuq: {exc.message}", file=sys.stderr)
        return 1
    finally:
        db.dispose()
    return 0


def load_spec(path: str) -> Any:
    """A job spec from a JSON or YAML file (`-`: standard input)."""
    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    try:
        return json.loads(text)
    except ValueError:
        return yaml.load(text, Loader=_SpecLoader)


def cmd_submit(args: argparse.Namespace, client: Client) -> int:
    try:
        spec = load_spec(args.file)
    except (OSError, yaml.YAMLError) as exc:
        print(f"gpuq: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else {}
    job = client.json("POST", "/v1/jobs", json=spec, headers=headers)
    if args.json:
        _print_json(job)
    else:
        print(f"submitted job {job['id']} ({job['name']}): {job['status']}")
    return 0


def cmd_ls(args: argparse.Namespace, client: Client) -> int:
    params: dict[str, Any] = {"limit": args.limit}
    if args.status:
        params["status"] = args.status
    if args.owner:
        params["owner"] = args.owner
    page = client.json("GET", "/v1/jobs", params=params)
    if args.json:
        _print_json(page)
    else:
        print(tables.jobs_table(page["jobs"]) if page["jobs"] else "no jobs")
    return 0


def cmd_show(args: argparse.Namespace, client: Client) -> int:
    job = client.json("GET", f"/v1/jobs/{args.id}")
    _print_json(job) if args.json else print(tables.job_summary(job))
    return 0


def cmd_logs(args: argparse.Namespace, client: Client) -> int:
    """The log as text; with --json, one `{"job_id", "line"}` object per line."""
    params: dict[str, Any] = {}
    if args.tail:
        params["tail"] = args.tail
    path = f"/v1/jobs/{args.id}/logs"
    if args.follow:
        chunks = client.stream(path, follow="true", **params)
    else:
        chunks = iter([client.request("GET", path, params=params).content])
    if not args.json:
        for chunk in chunks:
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
        return 0
    pending = b""
    for chunk in chunks:
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            print(
                json.dumps({"job_id": args.id, "line": line.decode(errors="replace")}), flush=True
            )
    if pending:
        print(json.dumps({"job_id": args.id, "line": pending.decode(errors="replace")}))
    return 0


def cmd_watch(args: argparse.Namespace, client: Client) -> int:
    return watch(client, args.id, as_json=args.json)


def cmd_artifacts(args: argparse.Namespace, client: Client) -> int:
    """Lists a job's files, or downloads one (`-o` names the file; `-` for stdout)."""
    params = {"attempt": args.attempt} if args.attempt else {}
    if args.name is None:
        listing = client.json("GET", f"/v1/jobs/{args.id}/artifacts", params=params)
        if args.json:
            _print_json(listing)
        elif not listing["artifacts"]:
            print(f"job {args.id} has no files (yet)")
        else:
            print(tables.artifacts_table(listing["artifacts"]))
        return 0
    target = args.output or args.name.rsplit("/", 1)[-1]
    path = f"/v1/jobs/{args.id}/artifacts/{args.name}"
    if target == "-":
        for chunk in client.stream(path, **params):
            sys.stdout.buffer.write(chunk)
        return 0
    size = 0
    with open(target + ".part", "wb") as f:
        for chunk in client.stream(path, **params):
            f.write(chunk)
            size += len(chunk)
    Path(target + ".part").replace(target)
    if args.json:
        _print_json({"job_id": args.id, "name": args.name, "path": target, "size_bytes": size})
    else:
        print(f"saved {args.name} ({size:,} bytes) to {target}")
    return 0


def cmd_cancel(args: argparse.Namespace, client: Client) -> int:
    job = client.json("POST", f"/v1/jobs/{args.id}/cancel")
    if args.json:
        _print_json(job)
    elif job["status"] == "cancelled":
        print(f"job {job['id']} cancelled")
    else:
        print(f"job {job['id']} is stopping (SIGTERM sent; SIGKILL after the grace period)")
    return 0


def cmd_gpus(args: argparse.Namespace, client: Client) -> int:
    gpus = client.json("GET", "/v1/gpus")
    _print_json(gpus) if args.json else print(tables.gpus_table(gpus))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpuq", description="Share a GPU workstation for training.")
    sub = p.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the API and the scheduler")
    serve.add_argument("--host", help="bind address (default GPUQ_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default GPUQ_PORT or 8000)")
    serve.add_argument(
        "--insecure",
        action="store_true",
        help="serve on a non-loopback address even with no users (anyone may submit)",
    )
    serve.add_argument(
        "--api-only",
        action="store_true",
        help="serve the API without scheduling (extra API processes beside one scheduler)",
    )
    submit = sub.add_parser("submit", help="submit a job spec (JSON or YAML file, - for stdin)")
    submit.add_argument("file")
    submit.add_argument("--idempotency-key", help="replaying the same key returns the same job")
    ls = sub.add_parser("ls", help="list jobs, newest first")
    ls.add_argument("--status", action="append", help="only this state (repeatable)")
    ls.add_argument("--owner")
    ls.add_argument("--limit", type=int, default=50)
    show = sub.add_parser("show", help="one job in detail")
    show.add_argument("id", type=int)
    logs = sub.add_parser("logs", help="a job's output")
    logs.add_argument("id", type=int)
    logs.add_argument("-f", "--follow", action="store_true", help="stream until the job ends")
    logs.add_argument("--tail", type=int, help="only the last N lines")
    cancel = sub.add_parser("cancel", help="cancel a job")
    cancel.add_argument("id", type=int)
    watch_cmd = sub.add_parser("watch", help="a live progress bar until the job ends")
    watch_cmd.add_argument("id", type=int)
    files = sub.add_parser("artifacts", help="list a job's files, or download one")
    files.add_argument("id", type=int)
    files.add_argument("name", nargs="?", help="the file to download, e.g. model.keras")
    files.add_argument("-o", "--output", help="where to save it (default: its name; - stdout)")
    files.add_argument("--attempt", type=int, help="an earlier attempt's files")
    sub.add_parser("gpus", help="GPUs, their memory and jobs")
    user_cmd = sub.add_parser("users", help="manage users and tokens (on this machine)")
    user_sub = user_cmd.add_subparsers(dest="action", required=True)
    add = user_sub.add_parser("add", help="add a user and print their token once")
    add.add_argument("name")
    add.add_argument("--admin", action="store_true", help="may act on every job and GPU")
    user_sub.add_parser("ls", help="list users (never their tokens)")
    revoke = user_sub.add_parser("revoke", help="revoke a user's token")
    revoke.add_argument("name")
    for command in [*(sub.choices[name] for name in COMMANDS), *user_sub.choices.values()]:
        command.add_argument("--json", action="store_true", help="print JSON for scripts")
    return p


COMMANDS = {
    "submit": cmd_submit,
    "ls": cmd_ls,
    "show": cmd_show,
    "logs": cmd_logs,
    "cancel": cmd_cancel,
    "gpus": cmd_gpus,
    "watch": cmd_watch,
    "artifacts": cmd_artifacts,
}


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "serve":
        return cmd_serve(args)
    if args.command == "users":
        return cmd_users(args)
    try:
        return COMMANDS[args.command](args, Client())
    except ApiError as exc:
        print(f"gpuq: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
