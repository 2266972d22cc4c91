"""Running the application on a real socket: start, report the address, stop cleanly."""

from __future__ import annotations

import os
from dataclasses import dataclass

from aiohttp import web

from shepherd.http.app import create_app
from shepherd.http.state import CONFIG, CREATED_ADMIN_TOKEN, CREATED_KEYS, LOCAL_CREDENTIAL, ServerConfig
from shepherd.storage import ServerFile, remove_server_file, write_server_file


@dataclass
class RunningServer:
    """An application listening on a TCP socket; `stop` answers open requests and checkpoints."""

    app: web.Application
    runner: web.AppRunner
    url: str

    @classmethod
    async def start(cls, config: ServerConfig, host: str, port: int) -> RunningServer:
        """Create the graph (store, agents) and listen on ``host:port`` (port 0 picks a free one).

        Raises:
            StoreError, PresetError: from creating the graph; nothing is left running.
            OSError: the address cannot be bound; the graph is closed again.
        """
        app = create_app(config)
        # open requests get up to the act timeout (and a little more) to be answered at shutdown
        runner = web.AppRunner(app, handle_signals=False, access_log=None,
                               shutdown_timeout=config.act_timeout_seconds + 5)
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
        return cls(app, runner, f"http://{shown_host}:{bound_port}")

    @property
    def created_keys(self) -> dict[str, str]:
        """API keys created at start-up, by agent name (shown once; the store keeps only hashes)."""
        return self.app[CREATED_KEYS]

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
            remove_server_file(self.app[CONFIG].data, self.app.get(LOCAL_CREDENTIAL))
