"""The learning server's rate limit and login throttle: `shepherd.wire.limits` (free of torch, so that the
deploy server throttles failed logins as this server does), under their old names here; and `ReadSlots`,
the cap on whole-curve reads at once."""

from __future__ import annotations

import contextlib
from typing import Iterator

from shepherd.wire.limits import LoginThrottle, RateLimiter, TooManyRequests

__all__ = ["LoginThrottle", "RateLimiter", "ReadSlots", "TooManyRequests"]


class ReadSlots:
    """At most ``limit`` long reads at once (whole learning curves: each streams megabytes off disk); more are
    refused at once (429, Retry-After), never queued. Used on the event loop only."""

    retry_after = 1.0

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.taken = 0

    @contextlib.contextmanager
    def slot(self, what: str) -> Iterator[None]:
        """Hold a slot while reading. Raises: TooManyRequests, all are taken."""
        if self.taken >= self.limit:
            raise TooManyRequests(f"{self.taken} {what} are under way, the most at once (--max-curve-reads); "
                                  f"retry in {self.retry_after:g} s", self.retry_after)
        self.taken += 1
        try:
            yield
        finally:
            self.taken -= 1
