"""Running the application on a real socket: start, report the address, stop cleanly; bound the number of
open connections and how long a connection may stay silent."""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import time
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from shepherd.http.app import create_app
from shepherd.admin import AdminService
from shepherd.http.state import ADMIN, CONFIG, CREATED_ADMIN_TOKEN, CREATED_KEYS, LOCAL_CREDENTIAL, ServerConfig
from shepherd.storage import ServerFile, remove_server_file, write_server_file

logger = logging.getLogger(__name__)

#: open files kept free for the store, models, logs and libraries when the connection limit is derived
RESERVED_FILES = 128


def connection_limit(config: ServerConfig) -> int:
    """``config.max_connections``, or the soft open-file limit less `RESERVED_FILES` (at least 16): past
    that, ``accept()`` would fail for every client alike."""
    if config.max_connections is not None:
        return config.max_connections
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


class _Refuse(asyncio.Protocol):
    """A connection over the limit: answered 503 at once and closed, before anything is read."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.write(_REFUSAL_RESPONSE)
        transport.close()


class _JsonErrorHandler(RequestHandler):
    """aiohttp's connection handler, answering what it refuses itself (malformed HTTP: 400; a bug outside
    the app: 500) with a JSON error instead of plain text, and logging malformed requests in one debug line
    instead of a traceback. No request bytes are echoed: they might hold a key."""

    __slots__ = ()

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
    are answered 503 and closed), and a new connection that has not sent its first request's headers
    within ``header_timeout`` seconds is closed. (aiohttp closes a connection waiting for its next request
    after the idle timeout, its ``keepalive_timeout``; the body timeout is `errors.error_middleware`'s.)"""

    def __init__(self, server: web.Server, limit: int, header_timeout: float) -> None:
        self.server = server
        self.limit = limit
        self.header_timeout = header_timeout
        self._waiting: set = set()  # handlers whose first request has not arrived (aiohttp's have no weakrefs)
        self._make_request = server.request_factory
        server.request_factory = self._request
        self._refused = FloodLog("refusing connections: %d are open, the limit (--max-connections)")
        self._slow = FloodLog("closed a connection that sent no request headers within %g s (--header-timeout)",
                              logging.INFO)

    def _request(self, message: Any, payload: Any, protocol: Any, writer: Any, task: Any) -> Any:
        self._waiting.discard(protocol)
        return self._make_request(message, payload, protocol, writer, task)

    def __call__(self) -> asyncio.BaseProtocol:
        if len(self.server.connections) >= self.limit:
            self._refused.note(self.limit)
            return _Refuse()
        handler = self.server()
        handler.__class__ = _JsonErrorHandler  # the same object layout, with JSON errors (see the class)
        self._waiting.add(handler)
        asyncio.get_running_loop().call_later(self.header_timeout, self._check_started, handler)
        return handler

    def _check_started(self, handler: Any) -> None:
        if handler in self._waiting:
            self._waiting.discard(handler)
            if handler.transport is not None:
                self._slow.note(self.header_timeout)
                handler.force_close()

    def __getattr__(self, name: str) -> Any:  # everything else is the server's (shutdown, connections, ...)
        return getattr(self.server, name)


class _GuardedRunner(web.AppRunner):
    """An AppRunner whose sites accept connections through a `ConnectionGuard`."""

    def __init__(self, app: web.Application, limit: int, header_timeout: float, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._limit, self._header_timeout = limit, header_timeout

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        return ConnectionGuard(server, self._limit, self._header_timeout)  # type: ignore[return-value]


class _ResourceErrors:
    """An event-loop exception handler that turns asyncio's "socket.accept() out of system resource"
    (logged with a traceback at every accept that fails while the process is out of open files) into one
    line a minute; every other error goes to the handler that was there before."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.previous = loop.get_exception_handler()
        self._log = FloodLog("accept() fails: the process is out of open files (%s); lower --max-connections "
                             "or raise the open-file limit (ulimit -n)", logging.ERROR)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") == "socket.accept() out of system resource":
            self._log.note(context.get("exception"))
        elif self.previous is not None:
            self.previous(loop, context)
        else:
            loop.default_exception_handler(context)

    def restore(self) -> None:
        if self.loop.get_exception_handler() is self:
            self.loop.set_exception_handler(self.previous)


@dataclass
class RunningServer:
    """An application listening on a TCP socket; `stop` answers open requests and checkpoints."""

    app: web.Application
    runner: web.AppRunner
    url: str
    resource_errors: _ResourceErrors | None = None

    @classmethod
    async def start(cls, config: ServerConfig, host: str, port: int) -> RunningServer:
        """Create the graph (store, agents) and listen on ``host:port`` (port 0 picks a free one).

        Raises:
            StoreError, PresetError: from creating the graph; nothing is left running.
            OSError: the address cannot be bound; the graph is closed again.
        """
        app = create_app(config)
        # open requests get up to the act timeout (and a little more) to be answered at shutdown
        runner = _GuardedRunner(app, connection_limit(config), config.header_timeout_seconds,
                                handle_signals=False, access_log=None, shutdown_timeout=config.act_timeout_seconds + 5,
                                keepalive_timeout=config.idle_timeout_seconds)
        try:
            await runner.setup()
        except BaseException:
            await runner.cleanup()  # what started before the failure (the data folder's lock) is released
            raise
        shown_host = f"[{host}]" if ":" in host else host
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
            bound_port = runner.addresses[0][1]
            # the admin commands reach this server through loopback, with this run's local credential
            local_host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "[::1]"}.get(host, shown_host)
            write_server_file(config.data, ServerFile(f"http://{local_host}:{bound_port}", app[LOCAL_CREDENTIAL],
                                                      os.getpid()))
        except BaseException:
            await runner.cleanup()
            raise
        resource_errors = _ResourceErrors(asyncio.get_running_loop())
        resource_errors.loop.set_exception_handler(resource_errors)
        return cls(app, runner, f"http://{shown_host}:{bound_port}", resource_errors)

    @property
    def created_keys(self) -> dict[str, str]:
        """API keys created at start-up, by agent name (shown once; the store keeps only hashes)."""
        return self.app[CREATED_KEYS]

    @property
    def admin(self) -> AdminService:
        """The admin service of the served data folder (what the command line does goes through it)."""
        return self.app[ADMIN]

    @property
    def admin_token(self) -> str:
        """The admin token created at this start ("" if the data folder had one): shown once."""
        return self.app[CREATED_ADMIN_TOKEN]

    async def stop(self) -> None:
        """Answer the open requests, checkpoint every agent and close the store, and only then withdraw
        ``server.json`` (if it is still this server's).

        Raises:
            OSError: ``server.json`` could not be withdrawn; everything else was done.
        """
        try:
            await self.runner.cleanup()
        finally:
            if self.resource_errors is not None:
                self.resource_errors.restore()
            remove_server_file(self.app[CONFIG].data, self.app.get(LOCAL_CREDENTIAL))
