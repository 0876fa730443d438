"""Who is at the other end of a loopback TCP connection: the account that owns the
client's socket, as the kernel lists it in `/proc/net/tcp` and `/proc/net/tcp6`.

On a local socket the kernel says who connects (`SO_PEERCRED`); over TCP it says nothing,
but a loopback client's socket is this machine's too, listed with its owner's uid. That is
how open mode, where every caller acts as an admin, keeps other accounts out when gpuq
runs as root over TCP as well as on its socket (`open_mode.admit`).
"""

import ipaddress
from pathlib import Path

TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
ESTABLISHED = "01"

Address = tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]


def _address(text: str) -> Address:
    """`0100007F:1F40` (each 32-bit word of the address in the host's order: little-endian
    on every machine gpuq runs on) as an address and a port; an IPv4-mapped IPv6 address
    as the IPv4 one it maps."""
    host, port = text.split(":")
    raw = b"".join(bytes.fromhex(host[i : i + 8])[::-1] for i in range(0, len(host), 8))
    address = ipaddress.ip_address(raw)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address, int(port, 16)


def _normal(host: str, port: int) -> Address:
    address = ipaddress.ip_address(host.split("%")[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address, port


def tcp_peer_uid(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The uid owning the connected socket at `client` whose other end is `server`; None
    if the kernel lists no such connection (it is not this machine's, or it is gone)."""
    wanted = (_normal(*client), _normal(*server))
    for table in TABLES:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 8 or fields[3] != ESTABLISHED:
                continue
            try:
                if (_address(fields[1]), _address(fields[2])) == wanted:
                    return int(fields[7])
            except ValueError:
                continue
    return None
