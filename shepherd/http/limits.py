"""The learning server's rate limit and login throttle: `shepherd.wire.limits` (free of torch, so that the
deploy server throttles failed logins as this server does), under their old names here; and `ReadSlots`,
the cap on whole-curve reads at once per credential, and the stall timeout of each."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from typing import Iterator

from aiohttp import web

from shepherd.wire.limits import LoginThrottle, RateLimiter, TooManyRequests

__all__ = ["LoginThrottle", "RateLimiter", "ReadSlots", "StalledReader", "TooManyRequests"]

logger = logging.getLogger(__name__)


class StalledReader(ConnectionError):
    """A long read's client took nothing of it for the stall timeout: its connection was dropped."""


class ReadSlots:
    """At most ``limit`` long reads at once per credential (whole learning curves: each streams megabytes off
    disk): the admin and each agent's key holders have slots of their own, so that one caller holding reads open
    never keeps the others out. More are refused at once (429, Retry-After), never queued. A read whose client
    takes nothing for ``stall_seconds`` (its socket full: it stopped reading) loses its slot and its connection
    (`send`). Used on the event loop only."""

    retry_after = 1.0

    def __init__(self, limit: int, stall_seconds: float | None = None) -> None:
        self.limit = limit
        self.stall_seconds = stall_seconds
        self.taken: collections.Counter[str] = collections.Counter()  # by credential

    @contextlib.contextmanager
    def slot(self, who: str, what: str) -> Iterator[None]:
        """Hold one of ``who``'s slots while reading. Raises: TooManyRequests, all of them are taken."""
        if self.taken[who] >= self.limit:
            raise TooManyRequests(f"{self.taken[who]} {what} are under way for this credential, the most at once "
                                  f"(--max-curve-reads); retry in {self.retry_after:g} s", self.retry_after)
        self.taken[who] += 1
        try:
            yield
        finally:
            self.taken[who] -= 1
            if not self.taken[who]:
                del self.taken[who]

    async def send(self, request: web.Request, response: web.StreamResponse, data: bytes) -> None:
        """Write a piece of a long read. Raises: StalledReader, the client took none of it for ``stall_seconds``
        (the connection is dropped at once: a client that stopped reading would never take the rest)."""
        try:
            async with asyncio.timeout(self.stall_seconds):
                await response.write(data)
        except TimeoutError:
            logger.info("%s %s from %s: the client read nothing for %g s; its connection is dropped",
                        request.method, request.path, request.remote, self.stall_seconds)
            if request.transport is not None:
                request.transport.abort()
            raise StalledReader(f"the client read nothing for {self.stall_seconds:g} s") from None
