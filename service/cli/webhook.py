"""`gpuq webhook`: your default webhook and the secret your jobs' deliveries are signed
with."""

import sys
from typing import Annotated, Any

import typer

from service.cli.options import JsonFlag, api_client, print_json


def webhook(
    ctx: typer.Context,
    url: Annotated[
        str | None,
        typer.Argument(
            metavar="[URL]", help="Post your jobs' state changes here (jobs without their own)."
        ),
    ] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Remove your default webhook.")] = False,
    rotate_secret: Annotated[
        bool, typer.Option("--rotate-secret", help="Replace the signing secret.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Show your default webhook and signing secret, or set, clear or rotate them.

    Exits 2 if given both a URL and --clear.
    """
    if url is not None and clear:
        print("gpuq: give a URL or --clear, not both", file=sys.stderr)
        raise typer.Exit(2)
    change: dict[str, Any] = {}
    if url is not None or clear:
        change["url"] = url
    if rotate_secret:
        change["rotate_secret"] = True
    api = api_client(ctx)
    answer = (
        api.json("PUT", "/v1/webhook", json=change) if change else api.json("GET", "/v1/webhook")
    )
    if as_json:
        print_json(answer)
        return
    print(f"url:    {answer['url'] or '(none: only jobs whose spec names a webhook notify)'}")
    print(f"secret: {answer['secret']}")
