"""`gpuq mcp --http`: streamable HTTP on 127.0.0.1, for its user's agent alone.

Loopback is open to every account on the machine, and this server acts with its user's
token: so every request must carry a secret, `Authorization: Bearer <secret>`, given in
`GPUQ_MCP_SECRET` or made at start and printed once on stderr. Without it, another member
logged in to the same box could act as this user.
"""

import hmac
import json
import os
import secrets
from collections.abc import Mapping
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer

#: what to send, in words, when the secret is missing or wrong
REFUSAL = json.dumps(
    {"error": "send Authorization: Bearer <the secret gpuq mcp --http printed>"}
).encode()


def secret_from(environ: Mapping[str, str] = os.environ) -> tuple[str, bool]:
    """The secret, and whether it was made here (to print) rather than given."""
    given = environ.get("GPUQ_MCP_SECRET", "").strip()
    return (given, False) if given else (secrets.token_urlsafe(32), True)


def serve_http(mcp: MCPServer, port: int, secret: str) -> None:
    """Serves `mcp` at http://127.0.0.1:`port`/mcp, each request checked for `secret`."""
    app = RequireSecret(mcp.streamable_http_app(), secret)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")


class RequireSecret:
    """ASGI middleware: an HTTP request without the bearer secret gets 401 and no more."""

    def __init__(self, app: Any, secret: str) -> None:
        self.app = app
        self.expected = f"Bearer {secret}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b"Bearer"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": REFUSAL})
                return
        await self.app(scope, receive, send)
