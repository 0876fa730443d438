"""What commands share: the `--json` flag, a job id argument, JSON output, and the API
client built from the global `--url` and `--token`."""

import contextlib
import json
import sys
from typing import Annotated, Any

import typer

from gpuq.http import Client

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
JobIdArg = Annotated[int, typer.Argument(metavar="ID", help="The job's id.", show_default=False)]


def print_json(data: Any) -> None:
    """Prints `data` as indented JSON, the shape scripts parse."""
    print(json.dumps(data, indent=2))


def api_client(ctx: typer.Context) -> Client:
    """The API client of this invocation, made once from the root's `--url`/`--token`.

    A caller that starts the app with `obj=Client(...)` (tests do) supplies its own.
    """
    root = ctx.find_root()
    if not isinstance(root.obj, Client):
        root.obj = Client(root.params.get("url"), root.params.get("token"))
    return root.obj


def note(text: str) -> None:
    """One of gpuq's own lines: on stderr, apart from the program's output (and nowhere
    once the terminal has gone away)."""
    with contextlib.suppress(OSError):
        print(f"gpuq: {text}", file=sys.stderr, flush=True)
