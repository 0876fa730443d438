"""`gpuq serve`: the API, and the scheduler in a process of its own beside it."""

import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

if TYPE_CHECKING:
    import uvicorn

    from service.runtime import Service
    from service.settings import Settings

SHUTDOWN_GRACE_S = 3


def serve(
    host: Annotated[
        str | None, typer.Option(help="Bind address (default GPUQ_HOST or 127.0.0.1).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port (default GPUQ_PORT or 8000).")] = None,
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure",
            help="Serve on a non-loopback address even with no users (anyone may submit); "
            "GPUQ_INSECURE=1 says the same.",
        ),
    ] = False,
    api_only: Annotated[
        bool,
        typer.Option(
            "--api-only",
            help="Serve the API without scheduling (extra API processes beside one scheduler).",
        ),
    ] = False,
) -> None:
    """Run the API and the scheduler."""
    # The server's modules load here, not at import: `gpuq ls` should start fast.
    from service.api.open_mode import is_loopback
    from service.settings import Settings

    _warn_unknown_variables()
    given = (("host", host), ("port", port), ("insecure", insecure or None))
    overrides: dict[str, Any] = {k: v for k, v in given if v is not None}
    settings = Settings(**overrides)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if _quiet_libraries(settings):
        logging.getLogger("alembic").setLevel(logging.WARNING)  # plugins, each migration
    from sqlalchemy.exc import OperationalError

    try:
        user_count, database = _open_database(settings.db_url)
    except OperationalError as exc:
        _fail(f"cannot open the database: {str(exc.orig).strip() or exc}")
    if user_count == 0 and not is_loopback(settings.host) and not settings.insecure:
        _fail(
            f"refusing to serve on {settings.host} with no users: anyone who can reach "
            "it could run programs on this machine. Add one with `gpuq users add NAME --admin` "
            "(then send its token), or pass --insecure."
        )
    log = logging.getLogger("gpuq")
    log.info("state in %s", settings.home.resolve())
    log.info("database %s", database)
    _run(settings, user_count, schedule=not api_only)


def _quiet_libraries(settings: "Settings") -> bool:
    """Whether libraries' lines below WARNING stay out (Alembic's set-up and migrations,
    uvicorn's start and stop): gpuq says the facts itself, unless GPUQ_LOG_LEVEL=debug."""
    return logging.getLevelName(settings.log_level.upper()) != logging.DEBUG


def _warn_unknown_variables() -> None:
    """Names each `GPUQ_*` variable gpuq does not know: a typo such as `GPUQ_EXCUTOR`
    would otherwise be ignored and jobs would run with the default."""
    import os

    from service.settings import unknown_variables

    for name, nearest in unknown_variables(os.environ):
        hint = f"did you mean {nearest}?" if nearest else "no gpuq setting is spelt like it"
        print(f"gpuq: WARNING: UNKNOWN SETTING {name} is ignored; {hint}", file=sys.stderr)


def _open_database(db_url: str) -> tuple[int, str]:
    """Brings the database's schema up to date; the active users, and the database in a
    few words (its URL without a password, its schema's revision)."""
    from service.store import migrate
    from service.store.db import Database
    from service.team import users

    db = Database.open(db_url)
    try:
        before, after = migrate.upgrade(db)
        if before == after:
            schema = f"schema {after}"
        else:
            schema = f"schema {after}, " + (f"upgraded from {before}" if before else "created")
        return len(users.active_users(db)), f"{db.safe_url}, {schema}"
    finally:
        db.dispose()


def _run(settings: "Settings", user_count: int, *, schedule: bool) -> None:
    """Opens the service and serves until stopped; exits 1 if the GPUs or the scheduler
    lock cannot be had."""
    log = logging.getLogger("gpuq")
    service = _open_service(settings, schedule=schedule)
    _say_who_may_come_in(settings, user_count)
    log.info("GPUs: %s", service.registry.inventory.describe())
    if not schedule:
        log.info("API only (--api-only): jobs are stored here and scheduled elsewhere")
    _serve_until_stopped(settings, service, user_count)


def _open_service(settings: "Settings", *, schedule: bool) -> "Service":
    """The service this process runs: the API with the scheduler in a process of its own,
    or (`--api-only`) the API alone; exits 1 if the GPUs or the scheduler lock cannot be
    had."""
    from service.gpus.inventory import InventoryError
    from service.runtime import open_api, open_with_scheduler_process
    from service.scheduler.loop import SchedulerLocked
    from service.scheduler.remote import SchedulerFailed
    from service.team.run_as import RunAsError

    try:
        return open_with_scheduler_process(settings) if schedule else open_api(settings)
    except (InventoryError, SchedulerLocked, SchedulerFailed, RunAsError) as exc:
        _fail(str(exc))


def _serve_until_stopped(settings: "Settings", service: "Service", user_count: int) -> None:
    """Serves on the address and on the local socket until SIGTERM or Ctrl-C, then closes
    the sockets and the service."""
    import uvicorn

    from gpuq.contract.processes import never_hung_up, spared_by_oom_killer

    log = logging.getLogger("gpuq")
    config = _server_config(settings, service)
    sockets = []
    path = settings.socket_path
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    never_hung_up()
    spared_by_oom_killer()
    try:
        sockets.append(config.bind_socket())
        log.info(
            "listening on http://%s:%d: the dashboard at /, the API's docs at /docs",
            settings.host,
            settings.port,
        )
        if path is not None:
            sockets.extend(_local_login(path, user_count))
        uvicorn.Server(config).run(sockets=sockets)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # stopping already: let it finish
        for sock in sockets:
            sock.close()
        if len(sockets) > 1 and path is not None:
            path.unlink(missing_ok=True)
        service.close()
        log.info("stopped")


def _server_config(settings: "Settings", service: "Service") -> "uvicorn.Config":
    """uvicorn's configuration of the app, its log levels and filters set."""
    import uvicorn

    from service.api import local_socket
    from service.api.app import create_app

    config = uvicorn.Config(
        create_app(settings, service),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        http=local_socket.PeerCredentialsProtocol,
        ws=local_socket.PeerCredentialsWebSockets,  # `gpuq shell`'s terminal
        # Event streams and followed logs never end on their own; without a bound,
        # one open `curl -N` would keep a stopping server up forever.
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
    if _quiet_libraries(settings):  # after Config, which sets uvicorn's levels
        error_log = logging.getLogger("uvicorn.error")
        error_log.setLevel(max(error_log.level, logging.WARNING))
    logging.getLogger("uvicorn.access").addFilter(_quiet_health_checks)
    return config


def _say_who_may_come_in(settings: "Settings", user_count: int) -> None:
    """Logs whether requests need a token, and loudly when none does."""
    log = logging.getLogger("gpuq")
    if user_count == 0:
        log.warning(
            "NO USERS DEFINED: gpuq is open to every process that can reach %s:%d, acting as "
            "admin. Add users with `gpuq users add NAME [--admin]` to require tokens.",
            settings.host,
            settings.port,
        )
    else:
        log.info("%d user(s): requests need `Authorization: Bearer <token>`", user_count)


def _local_login(path: Path, user_count: int) -> list[socket.socket]:
    """The local socket (`GPUQ_SOCKET`), bound; none, with a warning, if it cannot be."""
    from service.api import local_socket

    log = logging.getLogger("gpuq")
    try:
        bound = local_socket.bind(path)
    except OSError as exc:
        log.warning("no local login socket at %s: %s", path, exc)
        return []
    if user_count == 0 and os.geteuid() == 0:  # `users.check_open_peer`
        log.warning(
            "local login on %s for root alone while no user exists (gpuq runs as "
            "root: any other account would act there as an admin); add users "
            "with `gpuq users add NAME --admin` and bind members' accounts with "
            "--unix-user LOGIN to let them in",
            path,
        )
    else:
        log.info("local login on %s (who you are on this box; no token)", path)
    return [bound]


def _quiet_health_checks(record: logging.LogRecord) -> bool:
    """Leaves out uvicorn's access line of a `/healthz` that answered 200: a container's
    HEALTHCHECK asks every 30 s. A failed check is still logged."""
    args = record.args
    # uvicorn's access line: (client, method, path and query, HTTP version, status)
    return not (isinstance(args, tuple) and len(args) == 5 and args[2:5:2] == ("/healthz", 200))


def _exit_on_sigterm(signum: int, frame: object) -> NoReturn:
    """SIGTERM (`systemctl stop`, `docker stop`) outside uvicorn's own handler: before it
    serves, and after, when uvicorn raises again the signal that stopped it. Unwinds, so
    that the service closes (scheduler, launcher, socket) and gpuq exits 0."""
    raise SystemExit(0)


def _fail(message: str) -> NoReturn:
    print(f"gpuq: {message}", file=sys.stderr)
    raise typer.Exit(1)
