"""The head's side of its front ends: start K ``python -m shepherd.front`` processes on the public port,
restart one that dies, stop them all at shutdown.

The head holds the public port with a socket that is bound (``SO_REUSEPORT``) but never listens: the port
stays this run's while front ends come and go (a port 0 is picked once, here), and the kernel hands
connections only to listening sockets, the front ends'.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from shepherd.wire.steps import DEFAULT_MAX_REWARD

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
#: a front end that dies within this many seconds of its start is restarted after `BACKOFF_SECONDS`
#: instead of at once, so a front end that cannot start does not spin
QUICK_DEATH_SECONDS = 2.0
BACKOFF_SECONDS = 1.0
START_TIMEOUT_SECONDS = 30.0


class FrontEndError(RuntimeError):
    """A front end did not start (its reason is in the server's log, on standard error)."""


@dataclass(frozen=True)
class FrontEndSettings:
    """What every front end is started with: the public address, the head's private URL and token, and the
    limits of the public port."""

    count: int
    host: str
    port: int
    head_url: str
    token: str
    max_body_bytes: int
    body_timeout_seconds: float
    idle_timeout_seconds: float
    shutdown_timeout_seconds: float
    #: each front end's own limits on its public connections (None: derived from its open-file limit)
    max_connections: int | None = None
    header_timeout_seconds: float = 10.0
    #: connections one client address may hold on a front end (None: half of its limit; 0: no cap), and the
    #: trusted proxies, which have no cap
    max_connections_per_address: int | None = None
    trusted_proxies: tuple[str, ...] = ()
    #: the bound on reward magnitudes the head checks steps with (`run.py --max-reward`): a front end that
    #: answers a step from its snapshot checks it with the same
    max_reward: float = DEFAULT_MAX_REWARD


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` with ``SO_REUSEPORT``, not listening (port 0: a free port).

    Raises:
        OSError: the address cannot be bound (in use by a socket without SO_REUSEPORT, say).
    """
    family, kind, proto, _, address = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                         flags=socket.AI_PASSIVE)[0]
    holder = socket.socket(family, kind, proto)
    try:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            holder.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        holder.bind(address)
    except BaseException:
        holder.close()
        raise
    return holder


class FrontEnds:
    """K supervised front-end processes. `start` returns once every one listens; a front end that exits
    while the head serves is started again (its clients reconnect, to a living one); `stop` ends them."""

    def __init__(self, settings: FrontEndSettings) -> None:
        self.settings = settings
        self.processes: list[asyncio.subprocess.Process | None] = [None] * settings.count
        self.restarts = 0
        self._watchers: list[asyncio.Task[None]] = []
        self._stopping = False

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes if process is not None and process.returncode is None]

    async def start(self) -> None:
        """Start every front end and wait until each listens.

        Raises:
            FrontEndError: one did not start within `START_TIMEOUT_SECONDS` (those started are stopped).
        """
        try:
            for slot in range(self.settings.count):
                self.processes[slot] = await self._spawn()
        except BaseException:
            await self.stop()
            raise
        self._watchers = [asyncio.create_task(self._watch(slot)) for slot in range(self.settings.count)]

    async def _spawn(self) -> asyncio.subprocess.Process:
        s = self.settings
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "shepherd.front", "--head", s.head_url, "--host", s.host, "--port", str(s.port),
            "--max-body", str(s.max_body_bytes), "--body-timeout", str(s.body_timeout_seconds),
            "--idle-timeout", str(s.idle_timeout_seconds), "--shutdown-timeout", str(s.shutdown_timeout_seconds),
            "--header-timeout", str(s.header_timeout_seconds),
            *(() if s.max_connections is None else ("--max-connections", str(s.max_connections))),
            *(() if s.max_connections_per_address is None else
              ("--max-connections-per-address", str(s.max_connections_per_address))),
            *(arg for proxy in s.trusted_proxies for arg in ("--trusted-proxy", proxy)),
            "--max-reward", repr(s.max_reward),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env,
            start_new_session=True)  # Ctrl-C reaches the head only, which stops the front ends in order
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(s.token.encode() + b"\n")  # the pipe stays open: its end tells the front end we ended
        await process.stdin.drain()
        try:
            line = await asyncio.wait_for(process.stdout.readline(), START_TIMEOUT_SECONDS)
        except asyncio.TimeoutError:
            line = b""
        if not line.startswith(b"listening"):
            if process.returncode is None:
                process.kill()
            await process.wait()
            raise FrontEndError(f"a front end did not start on {s.host}:{s.port} (status {process.returncode}); "
                                "the server's log says why")
        logger.info("front end %d listening on %s:%d", process.pid, s.host, s.port)
        return process

    async def _watch(self, slot: int) -> None:
        while not self._stopping:
            process = self.processes[slot]
            assert process is not None
            started = time.monotonic()
            status = await process.wait()
            if self._stopping:
                return
            logger.warning("front end %d exited (status %s); starting another", process.pid, status)
            if time.monotonic() - started < QUICK_DEATH_SECONDS:
                await asyncio.sleep(BACKOFF_SECONDS)
            try:
                self.processes[slot] = await self._spawn()
                self.restarts += 1
            except (FrontEndError, OSError) as error:  # (an OSError: no process could be made, or it died at once;
                logger.error("%s; trying again", error)  # uncaught, it ended this watcher: the slot for good)
                await asyncio.sleep(BACKOFF_SECONDS)
                self.processes[slot] = process  # waited already: the loop tries again at once

    def terminate(self) -> None:
        """Ask every front end to stop (they finish their open requests first); no restarts from now on."""
        self._stopping = True
        for watcher in self._watchers:
            watcher.cancel()
        for process in self.processes:
            if process is not None and process.returncode is None:
                process.terminate()

    async def stop(self, timeout: float = 40.0) -> None:
        """`terminate`, then wait for every front end to exit (killed after ``timeout`` seconds)."""
        self.terminate()
        for process in self.processes:
            if process is None:
                continue
            try:
                await asyncio.wait_for(process.wait(), timeout)
            except asyncio.TimeoutError:
                process.kill()
                await process.wait()
            if process.stdin is not None:
                process.stdin.close()
