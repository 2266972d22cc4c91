"""IP addresses and networks named on the command line (``--trusted-proxy``): parsed once, matched per
connection (`shepherd.wire.connections`) and per request (`shepherd.http.proxies`, the front ends); a trusted
proxy's client from its ``X-Forwarded-For`` (`forwarded_client`); the site an address belongs to (`site_of`:
an IPv6 address's /64), which limits count as one client. Plain Python."""

from __future__ import annotations

import ipaddress
from typing import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: the IPv6 prefix one site is given (RFC 6177: a /64 at least, 2^64 addresses), counted as one client
IPV6_SITE_PREFIX = 64


def parse_networks(values: Iterable[str]) -> tuple[Network, ...]:
    """Addresses or networks (``10.0.0.5``, ``10.0.0.0/8``, ``::1``).

    Raises:
        ValueError: one is neither, naming it.
    """
    networks = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise ValueError(f"--trusted-proxy {value!r} is not an IP address or network (10.0.0.5, 10.0.0.0/8, "
                             "::1)") from None
    return tuple(networks)


def address_of(text: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address((text or "").strip())
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def trusted(text: str | None, networks: tuple[Network, ...]) -> bool:
    """Whether an address is one of the trusted proxies."""
    address = address_of(text)
    return address is not None and any(address in network for network in networks)


def forwarded_client(headers: list[str], networks: tuple[Network, ...]) -> str | None:
    """The client's address from a trusted proxy's ``X-Forwarded-For`` headers (None: none there, or only
    proxies, or an entry that is no address)."""
    hops = [hop.strip() for header in headers for hop in header.split(",")]
    for hop in reversed(hops):
        address = address_of(hop)
        if address is None:
            return None  # not an address: nothing to its left can be believed
        if not any(address in network for network in networks):
            return str(address)
    return None


def site_of(text: str | None) -> str:
    """Who an address is, for the limits that count clients: an IPv6 address's /64 (``2001:db8:1:2::/64``: every
    address of one site's prefix, which a client may change at will), an IPv4 address (or an IPv4-mapped IPv6
    one) as itself, anything that is no address as it is written."""
    address = address_of(text)
    if address is None:
        return text or "?"
    if isinstance(address, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((address, IPV6_SITE_PREFIX), strict=False))
    return str(address)
