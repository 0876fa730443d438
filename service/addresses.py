"""Where a webhook may be posted: public internet addresses only, unless an admin allows an
address, a network or a host name in GPUQ_WEBHOOK_ALLOW.

gpuq posts from inside the team's network (as root), and tells a job's owner how each
attempt went: without this rule a member could make it probe loopback services, the cloud
metadata address (169.254.169.254) and private hosts. A URL naming an address is judged
when it is registered; every URL is judged again at send time on the addresses its host
resolves to (`transport`), since a name can point anywhere and change.
"""

import re
import socket
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network
from urllib.parse import urlsplit

from service.errors import Invalid

IPAddress = IPv4Address | IPv6Address

#: What an admin writes to let webhooks reach internal receivers.
SETTING = "GPUQ_WEBHOOK_ALLOW"
#: A DNS name: letters, digits and hyphens between dots, an optional final dot.
_NAME = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)(\.(?!-)[a-z0-9-]{1,63}(?<!-))*\.?$")


@dataclass(frozen=True)
class AllowList:
    """Addresses and names webhooks may reach though they are not public."""

    networks: tuple[IPv4Network | IPv6Network, ...] = ()
    names: frozenset[str] = frozenset()  #: lower case, without a final dot

    @classmethod
    def parse(cls, text: str) -> "AllowList":
        """Comma- or space-separated addresses, CIDR networks and host names; raises
        ValueError naming the first entry that is none of them."""
        networks, names = [], set()
        for entry in text.replace(",", " ").split():
            try:
                networks.append(ip_network(entry, strict=False))
                continue
            except ValueError:
                pass
            name = entry.lower()
            if not _NAME.match(name) or name.replace(".", "").isdigit():
                raise ValueError(f"{entry!r} is no address, CIDR network or host name")
            names.add(name.rstrip("."))
        return cls(tuple(networks), frozenset(names))

    def names_host(self, host: str) -> bool:
        """Whether `host` is one of the allowed names (an admin vouches for where it points)."""
        return host.lower().rstrip(".") in self.names

    def covers(self, address: IPAddress) -> bool:
        """Whether an allowed network holds `address`, or the IPv4 address it embeds."""
        inner = _embedded(address)
        return any(a in net for net in self.networks for a in {address, inner})


def _embedded(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 one reaches (IPv4-mapped `::ffff:a.b.c.d`, 6to4), else
    itself: `::ffff:127.0.0.1` is loopback."""
    if isinstance(address, IPv6Address):
        return address.ipv4_mapped or address.sixtofour or address
    return address


def is_public(address: IPAddress) -> bool:
    """Whether `address` is a unicast internet address: not loopback, link-local, private,
    unspecified, shared (CGNAT 100.64/10), multicast, reserved or documentation, nor an
    IPv6 form of one."""
    address = _embedded(address)
    if isinstance(address, IPv6Address) and address.is_site_local:
        return False
    # `is_global` alone lets multicast through, and IPv6 ranges such as NAT64's 64:ff9b::/96
    # that lead back into IPv4 (reserved).
    return address.is_global and not (address.is_multicast or address.is_reserved)


def allowed(address: IPAddress, allow: AllowList) -> bool:
    """Whether a webhook may connect to `address`."""
    return is_public(address) or allow.covers(address)


def kind(address: IPAddress) -> str:
    """What sort of non-public address `address` is, for an error message."""
    address = _embedded(address)
    for name in ("unspecified", "loopback", "link_local", "multicast", "reserved", "private"):
        if getattr(address, f"is_{name}"):
            return name.replace("_", "-")
    return "shared (carrier-grade NAT)" if address in ip_network("100.64.0.0/10") else "internal"


def _a(word: str) -> str:
    return f"an {word}" if word[0] in "aeiou" else f"a {word}"


def literal(host: str) -> IPAddress | None:
    """The address `host` names without asking DNS (`127.0.0.1`, `::1`, and the short forms
    the resolver also takes: `127.1`, `2130706433`, `0x7f.1`), or None for a name."""
    try:
        return ip_address(host)
    except ValueError:
        pass
    try:
        return IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def check_url(url: str, allow: AllowList, loc: tuple[str | int, ...]) -> None:
    """Raises `Invalid` at `loc` if `url`'s host is an address (or `localhost`) webhooks may
    not reach. A name is judged when a delivery resolves it."""
    host = urlsplit(url).hostname
    if host is None or allow.names_host(host):
        return
    name = host.rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):  # this host, whatever DNS says
        address: IPAddress | None = IPv4Address("127.0.0.1")
        what = f"{host} is this host"
    else:
        address = literal(host)
        what = f"{host} is {_a(kind(address))} address" if address is not None else ""
    if address is None or allowed(address, allow):
        return
    raise Invalid(
        loc,
        f"{what}: webhooks go to public internet addresses only, unless an admin allows "
        f"the address in {SETTING}",
    )
