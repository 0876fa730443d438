"""Who is at the other end of a loopback TCP connection: the account that owns the
client's socket, as the kernel knows it.

On a local socket the kernel says who connects (`SO_PEERCRED`); over TCP it says nothing,
but a loopback client's socket is this machine's too, and the kernel keeps its owner's
uid. That is how open mode, where every caller acts as an admin, keeps other accounts out
when gpuq runs as root over TCP as well as on its socket (`open_mode.admit`).

It asks as `ss` does: one socket by its addresses and ports, over the kernel's sock_diag
netlink interface (microseconds). Where that is closed (a seccomp filter, an old kernel),
it reads the whole of `/proc/net/tcp` and `tcp6`, which takes milliseconds on a big host.
"""

import contextlib
import ipaddress
import socket
import struct
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
    if the kernel knows no such connection (it is not this machine's, or it is gone)."""
    wanted = (_normal(*client), _normal(*server))
    with contextlib.suppress(OSError):
        return _ask_netlink(*wanted)
    return _read_tables(wanted)


NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 1
NLMSG_ERROR = 2
TCP_ESTABLISHED = 1
#: `struct nlmsghdr`, then `struct inet_diag_req_v2` and its `struct inet_diag_sockid`
#: (ports and addresses in network order; the cookie "none": match by the addresses)
HEADER = struct.Struct("=IHHII")
REQUEST = struct.Struct("=BBBBI")
SOCKET_ID = struct.Struct("!HH16s16s")
TAIL = struct.Struct("=III")
#: where `idiag_uid` lies in the answer: after the header, four bytes, the socket id and
#: three more words
UID_AT = HEADER.size + 4 + SOCKET_ID.size + TAIL.size + 12


def _ask_netlink(client: Address, server: Address) -> int | None:
    """The client socket's uid by sock_diag; `OSError` if netlink cannot be asked."""
    family = socket.AF_INET if client[0].version == 4 else socket.AF_INET6
    body = (
        REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, 1 << TCP_ESTABLISHED)
        + SOCKET_ID.pack(client[1], server[1], client[0].packed, server[0].packed)
        + TAIL.pack(0, 0xFFFFFFFF, 0xFFFFFFFF)
    )
    message = HEADER.pack(HEADER.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 1, 0)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as diag:
        diag.settimeout(1.0)
        diag.sendall(message + body)
        answer = diag.recv(8192)
    _, kind, _, _, _ = HEADER.unpack_from(answer)
    if kind == NLMSG_ERROR:
        (code,) = struct.unpack_from("=i", answer, HEADER.size)
        if code in (0, -2):  # ENOENT: no such connection
            return None
        raise OSError(-code, "sock_diag refused the question")
    if kind != SOCK_DIAG_BY_FAMILY or len(answer) < UID_AT + 4:
        raise OSError("sock_diag answered something else")
    (uid,) = struct.unpack_from("=I", answer, UID_AT)
    return int(uid)


def _read_tables(wanted: tuple[Address, Address]) -> int | None:
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
