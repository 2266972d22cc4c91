"""The connection guard both servers put in front of aiohttp (the learning server and the front ends):
at most so many open connections (more are answered 503 at once), and at most so many from one address (an IPv6
address's whole /64 counting as one; more from it are answered 429 at once: one client cannot hold every slot),
the last tenth of the slots kept for addresses that hold none yet (so that two or three clients holding their
share cannot keep everyone else out), a refused connection counted nowhere, a new connection must send its first
request's headers in time, and what aiohttp refuses itself (malformed HTTP) is answered in JSON. aiohttp and
orjson only: torch-free, so `shepherd.front` uses it too."""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from typing import Any, Callable, cast

import orjson
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from shepherd.wire.addresses import site_of

logger = logging.getLogger(__name__)

#: open files kept free for the store, models, logs and libraries when the connection limit is derived
RESERVED_FILES = 128
#: the share of the connection limit kept for addresses that hold no connection (at least one slot), when
#: connections per address are capped
KEPT_SHARE = 0.1


def connection_limit(max_connections: int | None) -> int:
    """``max_connections``, or the soft open-file limit less `RESERVED_FILES` (at least 16): past that,
    ``accept()`` would fail for every client alike."""
    if max_connections is not None:
        return max_connections
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 65_536
    return max(16, soft - RESERVED_FILES)


class FloodLog:
    """Logs one kind of event once, then at most one summary line per ``interval`` seconds: a flood of
    refused or slow connections costs a few lines, never one per connection."""

    def __init__(self, message: str, level: int = logging.WARNING, interval: float = 60.0) -> None:
        self.message = message
        self.level = level
        self.interval = interval
        self._count = 0
        self._last: float | None = None

    def note(self, *args: Any) -> None:
        now = time.monotonic()
        self._count += 1
        if self._last is None or now - self._last >= self.interval:
            suffix = "" if self._last is None else f" ({self._count} time(s) in the last {now - self._last:.0f} s)"
            logger.log(self.level, self.message + suffix, *args)
            self._last, self._count = now, 0


_REFUSAL = orjson.dumps({"error": "the server has its maximum of open connections; retry later"})
_REFUSAL_RESPONSE = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                     b"X-Content-Type-Options: nosniff\r\nRetry-After: 1\r\nConnection: close\r\n"
                     b"Content-Length: " + str(len(_REFUSAL)).encode() + b"\r\n\r\n" + _REFUSAL)




def _per_address_refusal(limit: int) -> bytes:
    body = orjson.dumps({"error": f"this address has its maximum of {limit} open connections "
                                  "(--max-connections-per-address); close some or retry later"})
    return (b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
            b"X-Content-Type-Options: nosniff\r\nRetry-After: 1\r\nConnection: close\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


_KEPT = orjson.dumps({"error": "the server's last free connections are kept for addresses that hold none; close "
                              "some of this address's or retry later"})
_KEPT_RESPONSE = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                  b"X-Content-Type-Options: nosniff\r\nRetry-After: 1\r\nConnection: close\r\n"
                  b"Content-Length: " + str(len(_KEPT)).encode() + b"\r\n\r\n" + _KEPT)


class _Refuse(asyncio.Protocol):
    """A connection over the limit: answered 503 at once and closed, before anything is read."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.write(_REFUSAL_RESPONSE)
        transport.close()


def per_address_limit(per_address: int | None, limit: int) -> int | None:
    """The most connections one address may hold: ``per_address`` (0: no cap), by default half of ``limit``."""
    if per_address is None:
        return max(1, limit // 2)
    return per_address or None


class _JsonErrorHandler(RequestHandler):
    """aiohttp's connection handler, answering what it refuses itself (malformed HTTP: 400; a bug outside
    the app: 500) with a JSON error instead of plain text, and logging malformed requests in one debug line
    instead of a traceback. No request bytes are echoed: they might hold a key."""

    __slots__ = ()
    guard: ConnectionGuard  # set on the guard's own subclass

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self.guard.admit(self, transport):  # answered and closed by the guard: never served, nor counted
            self._manager = None  # (as a handler whose connection ended: `connection_lost` does nothing)
            return
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.guard.release(self)
        super().connection_lost(exc)

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if status >= 500:
            logger.error("error handling a request from %s", request.remote, exc_info=exc)
            text = "internal server error; the server log has the details"
        else:
            logger.debug("malformed request from %s: %s", request.remote, type(exc).__name__)
            text = f"the request is not valid HTTP/1.1 ({type(exc).__name__}); send a JSON body over HTTP/1.1"
        if request.writer.output_size > 0:  # a reply has begun: too late for another one
            raise ConnectionError("a response was sent already; cannot send the error")
        response = web.Response(status=status, body=orjson.dumps({"error": text}), content_type="application/json",
                                headers={"X-Content-Type-Options": "nosniff"})
        response.force_close()
        return response


class ConnectionGuard:
    """The protocol factory in front of aiohttp's `web.Server`: at most ``limit`` open connections (more
    are answered 503 and closed), at most ``per_address`` of them from one peer address (an IPv6 address's /64
    counting as one, `site_of`; more from it are answered 429 and closed, as soon as the connection is made;
    None: no cap; addresses for which ``exempt`` says so, the trusted proxies, have none), the last `KEPT_SHARE`
    of ``limit`` kept, while ``per_address`` caps, for addresses that hold none (503 for the others), and a new
    connection that has not sent its first request's headers within ``header_timeout`` seconds is closed.
    (aiohttp closes a connection waiting for its next request after the idle timeout, its ``keepalive_timeout``;
    the body timeout is `errors.error_middleware`'s.)

    Only connections let in count: one refused is answered and closed without becoming aiohttp's, so an address
    re-opening its refused connections takes nothing from the others. Before its address is known (aiohttp
    makes the handler first), a connection is refused only when open files would run out (``open_files``: the
    derived limit, `connection_limit`, or ``limit`` if higher): a burst of refused connections never crowds out
    a good one arriving with them."""

    def __init__(self, server: web.Server, limit: int, header_timeout: float, per_address: int | None = None,
                 exempt: Callable[[str], bool] | None = None) -> None:
        self.server = server
        self.limit = limit
        self.open_files = max(limit, connection_limit(None))
        self.header_timeout = header_timeout
        self.per_address = per_address
        self.kept = max(1, int(limit * KEPT_SHARE)) if per_address is not None else 0
        self._exempt = exempt
        self._by_address: dict[str, int] = {}  # open connections per peer address (its /64 for IPv6)
        self._addresses: dict[Any, str | None] = {}  # each connection let in, and the address it counts under
        self._handler_class = type("_GuardedHandler", (_JsonErrorHandler,), {"__slots__": (), "guard": self})
        self._per_address_refused = FloodLog("refusing connections from %s: it has %d open, the limit "
                                             "(--max-connections-per-address)")
        self._waiting: set = set()  # handlers whose first request has not arrived (aiohttp's have no weakrefs)
        # handlers made whose connection_made has not run yet: a burst of connections accepted in one turn of
        # the loop makes them all before any is in ``server.connections``, so they count too
        self._unmade: list = []
        self._make_request = server.request_factory
        server.request_factory = self._request
        self._refused = FloodLog("refusing connections: %d are open, the limit (--max-connections)")
        self._kept_refused = FloodLog("refusing connections: the last %d free ones are kept for addresses that hold "
                                      "none, and %s holds some")
        self._slow = FloodLog("closed a connection that sent no request headers within %g s (--header-timeout)",
                              logging.INFO)

    def _request(self, message: Any, payload: Any, protocol: Any, writer: Any, task: Any) -> Any:
        self._waiting.discard(protocol)
        return self._make_request(message, payload, protocol, writer, task)

    def _open(self) -> int:
        """Connections open or about to be: the server's, and the handlers made whose connection is not yet
        made (no transport yet; a handler whose connection ended has no manager any more)."""
        self._unmade = [h for h in self._unmade if h.transport is None and h._manager is not None]
        return len(self.server.connections) + len(self._unmade)

    def __call__(self) -> asyncio.BaseProtocol:
        if self._open() >= self.open_files:
            self._refused.note(self.limit)
            return _Refuse()
        handler = self.server()
        handler.__class__ = self._handler_class  # the same object layout, with JSON errors (see the class)
        self._waiting.add(handler)
        self._unmade.append(handler)
        asyncio.get_running_loop().call_later(self.header_timeout, self._check_started, handler)
        return handler

    def _check_started(self, handler: Any) -> None:
        if handler in self._unmade:  # never connected (its transport failed): no longer about to be open
            self._unmade.remove(handler)
        if handler in self._waiting:
            self._waiting.discard(handler)
            if handler.transport is not None:
                self._slow.note(self.header_timeout)
                handler.force_close()

    def admit(self, handler: Any, transport: asyncio.BaseTransport) -> bool:
        """A connection is made: let it in, counted under its peer's address, or refuse it (answered and closed,
        counted nowhere): 503 when ``limit`` connections are in, or when only the kept slots are left and its
        address holds one already; 429 when its address has its maximum."""
        if len(self._addresses) >= self.limit:
            self._refused.note(self.limit)
            return self._refuse(handler, transport, _REFUSAL_RESPONSE)
        address: str | None = None
        if self.per_address is not None:
            peer = transport.get_extra_info("peername")
            peer_address = str(peer[0]) if isinstance(peer, tuple) and peer else None
            if peer_address is not None and not (self._exempt is not None and self._exempt(peer_address)):
                address = site_of(peer_address)
                count = self._by_address.get(address, 0)
                if count >= self.per_address:
                    self._per_address_refused.note(address, count)
                    return self._refuse(handler, transport, _per_address_refusal(self.per_address))
                if count and len(self._addresses) >= self.limit - self.kept:
                    self._kept_refused.note(self.kept, address)
                    return self._refuse(handler, transport, _KEPT_RESPONSE)
                self._by_address[address] = count + 1
        self._addresses[handler] = address
        return True

    def _refuse(self, handler: Any, transport: asyncio.BaseTransport, reply: bytes) -> bool:
        self._waiting.discard(handler)  # it waits for no request
        cast(asyncio.Transport, transport).write(reply)
        transport.close()
        return False

    def release(self, handler: Any) -> None:
        """A connection ended: no longer counted (under its address)."""
        if handler not in self._addresses:
            return
        address = self._addresses.pop(handler)
        if address is not None:
            left = self._by_address[address] - 1
            if left:
                self._by_address[address] = left
            else:
                del self._by_address[address]

    def __getattr__(self, name: str) -> Any:  # everything else is the server's (shutdown, connections, ...)
        return getattr(self.server, name)


class GuardedRunner(web.AppRunner):
    """An AppRunner whose sites accept connections through a `ConnectionGuard`."""

    def __init__(self, app: web.Application, limit: int, header_timeout: float, per_address: int | None = None,
                 exempt: Callable[[str], bool] | None = None, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._limit, self._header_timeout = limit, header_timeout
        self._per_address, self._exempt = per_address, exempt

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        return ConnectionGuard(server, self._limit, self._header_timeout,  # type: ignore[return-value]
                               self._per_address, self._exempt)
