"""The local socket: `gpuq serve` also listens on a Unix socket (GPUQ_SOCKET), where the
kernel says which account connects (`SO_PEERCRED`). A request there acts as the gpuq user
bound to that account, with no token (`users.authenticate_peer`).

Uvicorn hands the ASGI app no socket, so the HTTP protocol is wrapped: on a Unix
connection it puts the peer's uid into every request's scope, under `PEER_UID`; on TCP, a
way to ask the kernel for it (`TCP_PEER`). Nothing a client sends can put either there.
On a TCP connection it turns Nagle's algorithm off, which asyncio does by itself only for
sockets it made: without it a response written in two parts waits for the client's
delayed ACK (40 ms on Linux) on every reused connection.
"""

import asyncio
import contextlib
import functools
import os
import socket
from pathlib import Path
from typing import Any

from uvicorn.protocols.http.auto import AutoHTTPProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from gpuq.contract.processes import peer_credentials
from service.api.loopback_peer import tcp_peer_uid

PEER_UID = "gpuq.peer_uid"
#: on a TCP connection: a function that asks the kernel which account made it (`None` if it
#: cannot tell: `loopback_peer`), asked only where that matters (open mode under root)
TCP_PEER = "gpuq.tcp_peer"
#: anyone on the box may connect; who they are is the kernel's word, checked per request
SOCKET_MODE = 0o666


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket, as the kernel recorded it
    when it connected."""
    return peer_credentials(sock)[1]


def _with_scope(app: Any, key: str, value: Any) -> Any:
    """`app`, with `value` under `key` in every scope it is given."""

    async def with_peer(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scope[key] = value
        await app(scope, receive, send)

    return with_peer


def _with_peer(app: Any, transport: asyncio.BaseTransport) -> Any:
    """`app`, told who is at the other end of the connection: the uid on a Unix socket,
    how to ask for it on TCP."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family == socket.AF_UNIX:
        return _with_scope(app, PEER_UID, peer_uid(sock))
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        client, server = sock.getpeername()[:2], sock.getsockname()[:2]
        # Asked once for the connection: it is the same account's till it closes.
        return _with_scope(app, TCP_PEER, functools.cache(lambda: tcp_peer_uid(client, server)))
    return app


class PeerCredentialsProtocol(AutoHTTPProtocol):  # type: ignore[misc,valid-type]
    """Uvicorn's HTTP protocol, telling the app who is on the other end of a Unix socket
    (and sending TCP replies at once)."""

    app: Any  #: the ASGI app, set by uvicorn's protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.app = _with_peer(self.app, transport)
        super().connection_made(transport)


class PeerCredentialsWebSockets(WebSocketsSansIOProtocol):
    """Uvicorn's WebSocket protocol, which an upgraded connection switches to (and which
    takes the app from uvicorn's config, not from the HTTP protocol): the same word on who
    is at the other end of a Unix socket."""

    app: Any

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.app = _with_peer(self.app, transport)
        super().connection_made(transport)


def bind(path: Path) -> socket.socket:
    """A listening Unix socket at `path` that every local account may connect to; a stale
    socket file left by a crash is replaced, a live one or any other file is not."""
    if path.is_socket():
        if _answers(path):
            raise OSError(f"{path} is in use by another gpuq serve")
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        os.chmod(path, SOCKET_MODE)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def _answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True
