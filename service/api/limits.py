"""Refuses request bodies over a size limit with 413, before the app parses them."""

from collections.abc import Iterable

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_BODY_BYTES = 1024 * 1024


class BodySizeLimit:
    """Reads the body up front (at most `max_bytes` of it) and replays it to the app.

    Checking Content-Length alone would let a chunked upload through; failing inside the
    app's own read would be reported by FastAPI as a 400.
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int = MAX_BODY_BYTES,
        streamed: Iterable[str] = (),
    ) -> None:
        """`streamed`: paths whose routes read their body as a stream and bound it
        themselves (a snapshot's upload: up to GPUQ_SNAPSHOT_MAX_MB, never in memory)."""
        self.app = app
        self.max_bytes = max_bytes
        self.streamed = frozenset(streamed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] in ("GET", "HEAD", "OPTIONS")
            or scope["path"] in self.streamed
        ):
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            await self._refuse(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        detail = f"request body is larger than {self.max_bytes // 1024} KiB"
        await JSONResponse({"detail": detail}, status_code=413)(scope, receive, send)
