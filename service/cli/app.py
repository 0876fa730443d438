"""The `gpuq` command: `serve`, `doctor` and `users` work on this machine; the rest talk to
a gpuq server over HTTP.

Exit codes: 0 done, 1 the server refused or could not be reached (`gpuq: <why>` on
stderr) or a `doctor` check failed, 2 bad arguments or an unreadable spec file, 130
interrupted (Ctrl-C).
"""

import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from gpuq.http import ApiError, Client
from service.cli import (
    admin,
    artifacts,
    audit,
    doctor,
    gpus,
    jobs,
    run,
    serve,
    sweeps,
    usage,
    users,
    webhook,
)

PROG = "gpuq"


class _Group(TyperGroup):
    """The root command group: an `ApiError` from any command is one line on stderr and
    exit status 1, not a traceback."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except ApiError as exc:
            print(f"{PROG}: {exc}", file=sys.stderr)
            raise typer.Exit(1) from exc


def _root(
    url: Annotated[
        str | None,
        typer.Option(envvar="GPUQ_URL", help="The server (default http://127.0.0.1:8000)."),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(envvar="GPUQ_TOKEN", help="Your token, from `gpuq users add`."),
    ] = None,
) -> None:
    """Share a GPU workstation for training."""
    # --url and --token are read where a command first needs the API: `options.api_client`.


def build_app() -> typer.Typer:
    """The `gpuq` Typer app with every command."""
    app = typer.Typer(
        name=PROG,
        cls=_Group,
        callback=_root,
        no_args_is_help=True,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.command("serve")(serve.serve)
    app.command("doctor")(doctor.doctor)
    app.command("run", help=run.RUN_HELP, context_settings=run.SETTINGS)(run.run)
    app.command("shell", help=run.SHELL_HELP, context_settings=run.SETTINGS)(run.shell)
    app.command("submit")(jobs.submit)
    app.command("ls")(jobs.list_jobs)
    app.command("show")(jobs.show)
    app.command("logs")(jobs.logs)
    app.command("watch")(jobs.watch)
    app.command("cancel")(jobs.cancel)
    app.command("hold")(jobs.hold)
    app.command("release")(jobs.release)
    app.command("priority", context_settings=jobs.PRIORITY_SETTINGS)(jobs.priority)
    app.command("artifacts")(artifacts.artifacts)
    app.command("audit")(audit.audit)
    app.command("webhook")(webhook.webhook)
    app.command("usage")(usage.usage)
    app.add_typer(sweeps.app)
    app.add_typer(gpus.app)
    app.add_typer(users.app)
    app.add_typer(admin.app)
    return app


def main(argv: Sequence[str] | None = None, *, api: Client | None = None) -> int:
    """Runs `gpuq` with `argv` (default: the command line) and returns its exit status.

    `api` replaces the client built from --url/--token (tests pass an in-process one).
    """
    try:
        build_app()(args=argv, prog_name=PROG, obj=api)
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            return done.code or 0
        print(done.code, file=sys.stderr)  # sys.exit("message") means failure
        return 1
    return 0
