"""Running the application on a real socket: start, report the address, stop cleanly; bound the number of
open connections and how long a connection may stay silent."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from shepherd.wire.addresses import parse_networks, trusted
from shepherd.wire.connections import FloodLog, GuardedRunner, connection_limit, per_address_limit
from shepherd.http.app import create_app
from shepherd.admin import AdminService
from shepherd.http.state import ADMIN, CONFIG, CREATED_ADMIN_TOKEN, CREATED_KEYS, LOCAL_CREDENTIAL, ServerConfig
from shepherd.storage import ServerFile, remove_server_file, write_server_file

logger = logging.getLogger(__name__)


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
        limit = connection_limit(config.max_connections)
        per_address = (None if config.front_end_token is not None else
                       per_address_limit(config.max_connections_per_address, limit))
        proxies = parse_networks(config.trusted_proxies)
        runner = GuardedRunner(app, limit, config.header_timeout_seconds, per_address,
                               functools.partial(trusted, networks=proxies) if proxies else None,
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
