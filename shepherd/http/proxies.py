"""Client addresses behind reverse proxies (``run.py --trusted-proxy``): a request whose peer is a trusted
proxy has its client's address taken from ``X-Forwarded-For``, so that the login throttle counts each client
apart and the ``local`` rule of ``/metrics`` judges the client, not the proxy.

The client is the rightmost address of ``X-Forwarded-For`` (all such headers, in order) that is not itself a
trusted proxy: a proxy appends the address it saw, so whatever a client wrote there itself stays to the left
and is never believed. A trusted proxy's request without the header has no known client: it keeps the
proxy's address and is never local. From any other peer the header is ignored.
"""

from __future__ import annotations

from typing import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from shepherd.wire.addresses import Network, forwarded_client, parse_networks, trusted

__all__ = ["VIA_PROXY", "forwarded_client", "parse_networks", "proxy_middleware", "trusted"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: on a request a trusted proxy passed on: whether its client's address came from ``X-Forwarded-For``
VIA_PROXY = web.RequestKey("via_proxy", bool)


def proxy_middleware(networks: tuple[Network, ...]) -> Middleware:
    """A middleware that gives a trusted proxy's request its client's address (``request.remote``) and marks it
    (`VIA_PROXY`)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not trusted(request.remote, networks):
            return await handler(request)
        client = forwarded_client(request.headers.getall("X-Forwarded-For", []), networks)
        passed = request if client is None else request.clone(remote=client)
        passed[VIA_PROXY] = client is not None
        return await handler(passed)

    return middleware
