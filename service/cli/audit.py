"""`gpuq audit`: who submitted, cancelled, held, released or re-prioritised what."""

from typing import Annotated, Any

import typer

from service.cli import tables
from service.cli.options import JsonFlag, api_client, print_json

DEFAULT_LIMIT = 100


def audit(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option(help="At most this many entries.")] = DEFAULT_LIMIT,
    cursor: Annotated[
        str | None, typer.Option(help="The next page: the cursor the previous page printed.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """The audit log, newest first, a page at a time (admins)."""
    params: dict[str, Any] = {"limit": limit}
    if cursor:
        params["cursor"] = cursor
    page = api_client(ctx).json("GET", "/v1/audit", params=params)
    if as_json:
        print_json(page)
        return
    if page["entries"]:
        tables.print_rendered(tables.audit_table(page["entries"]))
    else:
        print("no audit entries")
    if page.get("next_cursor"):
        size = f" --limit {limit}" if limit != DEFAULT_LIMIT else ""
        print(f"more: gpuq audit{size} --cursor {page['next_cursor']}")
