"""Request-rate limits per API key, and slowing down repeated failed credentials from one address (the learning
server's and the deploy server's logins).

Both keep bounded state: buckets and failure counts live in LRU tables with a fixed capacity, so a
flood of new keys or addresses cannot grow the server's memory.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass

from shepherd.wire.addresses import site_of


class TooManyRequests(RuntimeError):
    """The caller is over a rate limit; it may retry after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class _LRU(collections.OrderedDict):
    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity

    def touch(self, key, default):
        value = self.pop(key, None)
        if value is None:
            value = default()
            if len(self) >= self.capacity:
                self.popitem(last=False)
        self[key] = value
        return value


@dataclass
class _Bucket:
    tokens: float
    stamp: float


class RateLimiter:
    """A token bucket per client id: ``rate`` environment steps a second on average, bursts up to ``burst``.

    A request costs its environment steps (one, or a vector step's N). One that costs more than the whole
    burst is let through on a full bucket and leaves it in debt, so a vector step is never refused forever;
    its key then waits for the debt to be paid back at ``rate``.
    """

    def __init__(self, rate: float, burst: float | None = None, capacity: int = 100_000) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = rate
        self.burst = burst if burst is not None else rate
        self._buckets = _LRU(capacity)

    def take(self, client_id: str, now: float | None = None, cost: float = 1.0) -> None:
        """Count a request of ``cost`` environment steps.

        Raises:
            TooManyRequests: too few tokens are left; ``retry_after`` says when enough are back.
        """
        now = time.monotonic() if now is None else now
        bucket = self._buckets.touch(client_id, lambda: _Bucket(self.burst, now))
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.stamp) * self.rate)
        bucket.stamp = now
        needed = min(cost, self.burst)
        if bucket.tokens < needed:
            wait = (needed - bucket.tokens) / self.rate
            raise TooManyRequests(f"too many requests for this API key (limit {self.rate:g} environment steps/s); "
                                  "slow down", wait)
        bucket.tokens -= cost


@dataclass
class _Failures:
    count: int
    first: float
    blocked_until: float = 0.0


class LoginThrottle:
    """Slows down failed attempts at a credential from one address (logins, dashboard sign-ins, Bearer
    tokens on the admin API): after ``free`` failures within ``window`` seconds, each further failure
    blocks the address for a delay that doubles, up to ``max_delay``. While blocked, an attempt is refused
    (`check` raises TooManyRequests) before its credential is even tried, so parallel requests gain
    nothing; a successful attempt forgives nothing (an attacker holding one valid key cannot reset the
    count); the count starts again ``window`` seconds after its first failure. An IPv6 address counts as its /64
    (`site_of`): a client that holds a prefix gains nothing by changing addresses within it."""

    def __init__(self, free: int = 5, window: float = 300.0, base_delay: float = 0.25, max_delay: float = 5.0,
                 capacity: int = 10_000) -> None:
        self.free = free
        self.window = window
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._failures = _LRU(capacity)

    def check(self, address: str, now: float | None = None) -> None:
        """Raises TooManyRequests while the address (its /64, for IPv6) is blocked by its failures."""
        record = self._failures.get(site_of(address))
        if record is None:
            return
        now = time.monotonic() if now is None else now
        if record.blocked_until > now:
            raise TooManyRequests("too many failed attempts from this address; wait before trying again",
                                  record.blocked_until - now)

    def failed(self, address: str, now: float | None = None) -> float:
        """Record a failed attempt; returns how long the address is now blocked (seconds), which is also
        how long to wait before answering it."""
        now = time.monotonic() if now is None else now
        record = self._failures.touch(site_of(address), lambda: _Failures(0, now))
        if now - record.first > self.window:
            record.count, record.first = 0, now
        record.count += 1
        over = record.count - self.free
        delay = 0.0 if over <= 0 else min(self.max_delay, self.base_delay * 2 ** (over - 1))
        record.blocked_until = max(record.blocked_until, now + delay)
        return delay


