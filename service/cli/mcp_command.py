"""`gpuq mcp`: gpuq's tools and resources for coding agents, over stdio (how agent clients
start a local server) or, with `--http`, streamable HTTP on loopback."""

from typing import Annotated

import typer

from gpuq.client import Gpuq
from gpuq.http import ApiError
from service.cli.options import api_client, note


def mcp(
    ctx: typer.Context,
    http: Annotated[
        bool,
        typer.Option(
            "--http",
            help="Serve streamable HTTP on 127.0.0.1 (at /mcp) instead of stdio; each "
            "request needs `Authorization: Bearer` GPUQ_MCP_SECRET (made and printed if unset).",
        ),
    ] = False,
    port: Annotated[int, typer.Option(min=1, max=65535, help="With --http: the port.")] = 8765,
) -> None:
    """Serve gpuq to a coding agent as an MCP server, with your rights: your token
    (GPUQ_TOKEN) or your Unix account on the local socket; never more."""
    # The SDK loads here, not at import: `gpuq ls` should start fast.
    from service.cli.agent.server import build_server

    gq = Gpuq(http=api_client(ctx))
    try:
        me = gq.me()
    except ApiError as exc:
        note(f"cannot serve agents: {exc}")
        raise typer.Exit(1) from None
    server = build_server(gq, me)
    if not http:
        server.run("stdio")
        return
    from service.cli.agent.loopback import secret_from, serve_http

    secret, made = secret_from()
    note(f"MCP for {me.name} at http://127.0.0.1:{port}/mcp")
    if made:  # printed once: the agent client's config takes it as a header
        note(f"send the header: Authorization: Bearer {secret}")
    serve_http(server, port, secret)
