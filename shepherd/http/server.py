"""Running the application on a real socket: start, report the address, stop cleanly."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from shepherd.http.app import CREATED_KEYS, ServerConfig, create_app


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
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        bound_port = runner.addresses[0][1]
        shown_host = f"[{host}]" if ":" in host else host
        return cls(app, runner, f"http://{shown_host}:{bound_port}")

    @property
    def created_keys(self) -> dict[str, str]:
        """API keys created at start-up, by agent name (shown once; the store keeps only hashes)."""
        return self.app[CREATED_KEYS]

    async def stop(self) -> None:
        await self.runner.cleanup()
