"""Sessions lost and logins again, for every driver (`shepherd.client.loops`, `roles`, `acting`): a login that
waits out a server that went away or asks for a wait (`login_retrying`), what counts as a lost session (`requested`:
only what a request raises), and how long a driver waits before logging in again after losses in a row
(`Losses`)."""

from __future__ import annotations

import http.client
import logging
import socket
import time
from collections.abc import Callable
from typing import Any, TypeVar

from shepherd.client.connection import ShepherdError

logger = logging.getLogger(__name__)
T = TypeVar("T")


def login_retrying(client: Any, mode: str, retry_seconds: float, **fields: Any) -> None:
    """Log ``client`` in (any client with `login(mode, **fields)`), retrying a server that went away, or that asks
    for a wait (503, or 429: its rate limit, its session limit), after its Retry-After (at most 5 s)."""
    deadline = time.monotonic() + retry_seconds
    while True:
        try:
            client.login(mode, **fields)
            return
        except (OSError, http.client.HTTPException) as error:
            if time.monotonic() > deadline or (not client.reached and _not_there(error)):
                raise
            time.sleep(0.5)
        except ShepherdError as error:
            if error.status not in (429, 503) or time.monotonic() > deadline:
                raise
            time.sleep(min(error.retry_after or 1.0, 5.0))


class SessionLost(Exception):
    """A request's session is gone (401: the server restarted, the session expired or was logged out) or the
    server could not be reached (`requested`): a driver logs in again and starts its episodes over."""


class Losses:
    """A driver's sessions lost in a row, no episode ending between them: the second waits `FIRST_WAIT` seconds
    before logging in again and each next one twice as long (up to `LONGEST_WAIT`); the `LIMIT`-th is raised, so
    that a server that loses every session (or a session limit that evicts it at once) is not asked for good."""

    LIMIT = 10
    FIRST_WAIT, LONGEST_WAIT = 0.5, 30.0

    def __init__(self) -> None:
        self.in_a_row = 0

    def ended(self) -> None:
        """An episode ended: the sessions work."""
        self.in_a_row = 0

    def lost(self, error: SessionLost, what: str = "the episode starts over") -> None:
        """A session was lost (``error``): wait before logging in again, or raise.

        Raises:
            SessionLost: the `LIMIT`-th in a row, naming the last one's cause.
        """
        self.in_a_row += 1
        if self.in_a_row >= self.LIMIT:
            raise SessionLost(f"{self.in_a_row} sessions lost in a row with no episode ended; the last: {error}") \
                from error
        wait = 0.0 if self.in_a_row == 1 else min(self.FIRST_WAIT * 2 ** (self.in_a_row - 2), self.LONGEST_WAIT)
        logger.info("session lost (%s); logging in again%s, %s", error, f" in {wait:g} s" if wait else "", what)
        time.sleep(wait)


def requested(call: Callable[[], T]) -> T:
    """``call()``, a request to the server; what says its session was lost raised as `SessionLost`. Only the
    requests are wrapped so: an env's own errors (an ``OSError`` of its files or its device) are its own."""
    try:
        return call()
    except ShepherdError as error:
        if error.status != 401:
            raise
        raise SessionLost(error.message) from error
    except (OSError, http.client.HTTPException) as error:
        raise SessionLost(f"connection lost: {error or type(error).__name__}") from error


def _not_there(error: BaseException) -> bool:
    """Whether a connection error says that no server is there at all (rather than a passing failure)."""
    return isinstance(error, (ConnectionRefusedError, socket.gaierror))
