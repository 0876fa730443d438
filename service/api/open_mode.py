"""Open mode (no user exists: every caller acts as an admin) serves this machine only.

`gpuq serve` refuses to start open on a non-loopback address, but the last user can be
revoked while it runs; so `admit` checks each request that acts in open mode. It must come
over the local socket, or over TCP to a loopback address, from a loopback peer, directly
(no proxy's forwarding headers), and name this machine in its `Host`: a web page whose own
name resolves to 127.0.0.1 (DNS rebinding) names itself there. A browser's request must
also come from one of this machine's pages (`Origin`): a form on any site can POST to
127.0.0.1. `--insecure` (GPUQ_INSECURE) waives all of it. Where gpuq runs as root, root
alone may act (`users.check_open_peer`): on the socket the kernel says who connects, and
over loopback TCP it lists the client's socket with its owner (`loopback_peer`).

With users, none of this applies: a token is needed, and neither a rebinding page nor a
cross-site form has one, so a loopback gpuq behind a reverse proxy keeps any host name.
"""

import ipaddress
from functools import lru_cache
from urllib.parse import urlsplit

from fastapi import HTTPException, status
from starlette.requests import HTTPConnection

from service.api.local_socket import PEER_UID, TCP_PEER
from service.digits import only_digits
from service.errors import Forbidden
from service.settings import Settings
from service.team.accounts import running_as_root
from service.team.users import check_open_peer

FIRST_USER = (
    "create the first user on the gpuq host with `gpuq users add NAME --admin` and send its "
    "token (`Authorization: Bearer <token>`)"
)
#: Headers a reverse proxy adds: the request came from elsewhere.
FORWARDING = ("forwarded", "x-forwarded-for", "x-forwarded-host", "x-real-ip")


@lru_cache(maxsize=1024)  # asked of every request's peer and `Host` in open mode
def is_loopback(host: str) -> bool:
    """True for `localhost` and loopback addresses: only this machine can connect."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1, a dual-stack peer
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def names_this_machine(authority: str) -> bool:
    """Whether a `Host` header is a loopback name or address, with or without a port:
    `localhost:8000`, `127.0.0.1`, `127.1.2.3:80`, `[::1]:8000`."""
    if authority.startswith("["):
        name, closed, rest = authority[1:].partition("]")
        if not closed or (rest and not (rest.startswith(":") and only_digits(rest[1:]))):
            return False
    else:
        name, colon, port = authority.partition(":")
        if colon and not only_digits(port):
            return False
    return is_loopback(name)


def _from_this_machine(origin: str) -> bool:
    """Whether a browser's `Origin` is a page served from a loopback name or address."""
    try:
        host = urlsplit(origin).hostname
    except ValueError:
        return False
    return host is not None and is_loopback(host)


def admit(request: HTTPConnection, settings: Settings) -> None:
    """Raises unless `request` may act in open mode (the module's docstring says when):
    403 from beyond this machine, 421 for a `Host` that names another."""
    uid = request.scope.get(PEER_UID)
    if uid is not None:  # the local socket: the kernel's word that it is this machine
        check_open_peer(uid)  # and on who it is: under root, root alone
        return
    if settings.insecure:
        return
    if not is_loopback(settings.host):
        raise Forbidden(
            f"no user exists, and without users gpuq serves only loopback and its local "
            f"socket, while this server listens on {settings.host}: {FIRST_USER}, or use the "
            "local socket on the gpuq host (GPUQ_SOCKET)"
        )
    peer = request.client.host if request.client else "an unknown address"
    forwarded = any(name in request.headers for name in FORWARDING)
    if forwarded or not is_loopback(peer):
        came = "through a proxy" if forwarded else f"from {peer}"
        raise Forbidden(
            f"no user exists, and without users gpuq serves this machine only; this request "
            f"came {came}: {FIRST_USER}"
        )
    host = request.headers.get("host", "")
    if not names_this_machine(host):
        raise HTTPException(
            status.HTTP_421_MISDIRECTED_REQUEST,
            f"Host {host!r} is not served: with no user, gpuq answers only requests to "
            f"localhost, 127.0.0.1 or [::1] (no web page of another site may reach it); "
            f"{FIRST_USER} to serve other names",
        )
    origin = request.headers.get("origin")
    if origin is not None and not _from_this_machine(origin):
        raise Forbidden(
            f"a page of {origin} may not act here: with no user, gpuq takes browsers' "
            f"requests only from its own pages on this machine; {FIRST_USER}"
        )
    if running_as_root():
        check_open_peer(_tcp_peer(request))  # as on the socket: root alone


def _tcp_peer(request: HTTPConnection) -> int:
    """The uid of the account whose loopback connection made `request`; `Forbidden` if the
    kernel lists none (it ended meanwhile)."""
    ask = request.scope.get(TCP_PEER)
    uid = ask() if ask is not None else None
    if uid is None:
        raise Forbidden(
            f"no user exists and gpuq runs as root, so it serves root alone, and it cannot "
            f"tell which account made this connection: {FIRST_USER}"
        )
    return int(uid)
