"""IP addresses and networks named on the command line (``--trusted-proxy``): parsed once, matched per
connection (`shepherd.wire.connections`) and per request (`shepherd.http.proxies`, the front ends); a trusted
proxy's client from its ``X-Forwarded-For`` (`forwarded_client`). Plain Python."""

from __future__ import annotations

import ipaddress
from typing import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


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
