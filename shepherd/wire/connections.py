"""The connection guard both servers put in front of aiohttp (the learning server and the front ends):
at most so many open connections (more are answered 503 at once), and at most so many from one address (more
from it are answered 429 at once: one client cannot hold every slot), a new connection must send its first
request's headers in time, and what aiohttp refuses itself (malformed HTTP) is answered in JSON. aiohttp and
orjson only: torch-free, so `shepherd.front` uses it too."""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from typing import Any, Callable

import orjson
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

logger = logging.getLogger(__name__)

#: open files kept free for the store, models, logs and libraries when the connection limit is derived
RESERVED_FILES = 128


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
        super().connection_made(transport)
        if not self.guard.admit(self, transport):
            self.force_close()

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
    are answered 503 and closed), at most ``per_address`` of them from one peer address (more from it are
    answered 429 and closed, as soon as the connection is made; None: no cap; addresses for which ``exempt``
    says so, the trusted proxies, have none), and a new connection that has not sent its first request's
    headers within ``header_timeout`` seconds is closed. (aiohttp closes a connection waiting for its next
    request after the idle timeout, its ``keepalive_timeout``; the body timeout is
    `errors.error_middleware`'s.)"""

    def __init__(self, server: web.Server, limit: int, header_timeout: float, per_address: int | None = None,
                 exempt: Callable[[str], bool] | None = None) -> None:
        self.server = server
        self.limit = limit
        self.header_timeout = header_timeout
        self.per_address = per_address
        self._exempt = exempt
        self._by_address: dict[str, int] = {}  # open connections per peer address (those under the cap)
        self._addresses: dict[Any, str] = {}  # the handler of each connection counted there, and its address
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
        if self._open() >= self.limit:
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
        """A connection is made: count it under its peer's address, or refuse it (429, closed) if that address
        has its maximum already."""
        if self.per_address is None:
            return True
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else None
        if address is None or (self._exempt is not None and self._exempt(address)):
            return True
        count = self._by_address.get(address, 0)
        if count >= self.per_address:
            self._per_address_refused.note(address, count)
            assert isinstance(transport, asyncio.Transport)
            transport.write(_per_address_refusal(self.per_address))
            transport.close()
            return False
        self._by_address[address] = count + 1
        self._addresses[handler] = address
        return True

    def release(self, handler: Any) -> None:
        """A connection ended: no longer counted under its address."""
        address = self._addresses.pop(handler, None)
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
