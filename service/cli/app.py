"""The `gpuq` command: `serve`, `doctor` and `users` work on this machine; the rest talk to
a gpuq server over HTTP.

Exit codes: 0 done, 1 the server refused or could not be reached (`gpuq: <why>` on
stderr) or a `doctor` check failed, 2 bad arguments or an unreadable spec file, 130
interrupted (Ctrl-C).
"""

import inspect
import re
import sys
from collections.abc import Iterator, Sequence
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from gpuq.http import ApiError, Client
from service.cli import (
    admin,
    artifacts,
    audit,
    diff,
    doctor,
    gpus,
    jobs,
    mcp_command,
    rerun,
    reserve,
    run,
    serve,
    sweeps,
    usage,
    users,
    webhook,
)

PROG = "gpuq"


def reflow(text: str | None) -> str | None:
    r"""`text` with each paragraph's line breaks turned into spaces; blank lines between
    paragraphs stay, and so does a paragraph that starts with Click's `\b` (as written).
    Whatever follows `\f` is dropped, as Click does."""
    if not text:
        return text
    paragraphs = re.split(r"\n\s*\n", inspect.cleandoc(text.partition("\f")[0]))
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split()) for p in paragraphs)


def _commands(group: TyperGroup) -> Iterator[Any]:
    """`group` and every command and group under it."""
    yield group
    for command in group.commands.values():
        if isinstance(command, TyperGroup):
            yield from _commands(command)
        else:
            yield command


class _Group(TyperGroup):
    """The root command group: an `ApiError` from any command is one line on stderr and
    exit status 1, not a traceback; every command's help reads as paragraphs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Typer's rich help keeps a docstring's line breaks in the command list (and in
        # a help's later paragraphs), so they would break mid-sentence in any terminal.
        for command in _commands(self):
            command.help = reflow(command.help)
            command.short_help = reflow(command.short_help)

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
    app.command("rerun")(rerun.rerun)
    app.command("diff")(diff.diff)
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
    app.command("reserve")(reserve.reserve)
    app.command("reservations")(reserve.reservations)
    app.command("mcp")(mcp_command.mcp)
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
