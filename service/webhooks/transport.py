"""The HTTP client deliveries are sent with: it connects only where `addresses` allows.

The check is made where the socket is opened, an httpcore network backend under httpx: the
host is resolved once, every address it resolves to is judged, and the connection goes to
one of those very addresses, so a name that points elsewhere between the check and the
connection (DNS rebinding) gains nothing. TLS still verifies the certificate against the
URL's host name, which httpcore hands to `start_tls` apart from the address.
"""

import socket
from collections.abc import Iterable
from ipaddress import ip_address

import httpcore
import httpx

from service.addresses import SETTING, AllowList, allowed

#: What the owner reads when the guard refuses a delivery.
REFUSED = f"refused: address not allowed ({SETTING})"


class AddressNotAllowed(Exception):
    """A webhook's host resolved to an address webhooks may not reach."""

    def __init__(self, host: str, addresses: list[str]) -> None:
        super().__init__(f"{host} resolves to {', '.join(addresses)}: not allowed by {SETTING}")


class GuardedBackend(httpcore.SyncBackend):
    """Opens TCP connections only to addresses `allow` permits, resolving each host once."""

    def __init__(self, allow: AllowList) -> None:
        self.allow = allow

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        if self.allow.names_host(host):  # an admin vouches for wherever it points
            return super().connect_tcp(host, port, timeout, local_address, socket_options)
        try:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:  # the name does not resolve: it cannot be connected to
            raise httpcore.ConnectError(f"{host}: {exc}") from exc
        addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
        refused = [a for a in addresses if not allowed(ip_address(a), self.allow)]
        if refused:
            raise AddressNotAllowed(host, refused)
        failure: Exception | None = None
        for address in addresses:  # each as a literal: connecting resolves nothing again
            try:
                return super().connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure


class GuardedTransport(httpx.HTTPTransport):
    """httpx's own transport, connecting through `GuardedBackend`, never through a proxy."""

    def __init__(self, allow: AllowList) -> None:
        super().__init__(trust_env=False)
        # httpx 0.28 takes no network backend (encode/httpx#3749): replace the pool it made.
        # Loudly, should a later httpx keep it elsewhere, since the guard would be bypassed.
        if not isinstance(getattr(self, "_pool", None), httpcore.ConnectionPool):
            raise RuntimeError("httpx keeps its connection pool elsewhere: update GuardedTransport")
        limits = httpx.Limits()
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=GuardedBackend(allow),
        )


def client(allow: AllowList, timeout_s: float) -> httpx.Client:
    """A client for deliveries: guarded, no proxy from the environment, no redirects (a
    receiver's 3xx would otherwise lead the POST anywhere)."""
    return httpx.Client(
        transport=GuardedTransport(allow),
        timeout=timeout_s,
        follow_redirects=False,
        trust_env=False,
    )
