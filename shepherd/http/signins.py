"""Dashboard sign-ins: a random id in an HttpOnly, SameSite=Strict cookie, and a per-sign-in CSRF token
that every state-changing request from the page must echo in the ``X-CSRF-Token`` header.

A sign-in keeps the hash of the token it was opened with, never the token, and the admin API checks that
hash again on every request: revoking the API key (or replacing the admin token) ends its sign-ins.
"""

from __future__ import annotations

import collections
import hmac
import time
from dataclasses import dataclass

from shepherd.storage import new_secret

COOKIE = "shepherd_signin"
CSRF_HEADER = "X-CSRF-Token"


@dataclass(frozen=True)
class SignIn:
    id: str
    digest: str  # hash_key of the token signed in with
    csrf: str


class SignInTable:
    """Open sign-ins by id, ended after ``idle_seconds`` without a request; at most ``limit`` are kept
    (the oldest go first). Not thread-safe: the event loop owns it."""

    def __init__(self, idle_seconds: float = 8 * 3600.0, limit: int = 1000) -> None:
        self.idle_seconds = idle_seconds
        self.limit = limit
        self._open: collections.OrderedDict[str, tuple[SignIn, float]] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def open(self, digest: str) -> SignIn:
        signin = SignIn(new_secret(), digest, new_secret())
        self._open[signin.id] = (signin, time.monotonic())
        while len(self._open) > self.limit:
            self._open.popitem(last=False)
        return signin

    def get(self, signin_id: str | None) -> SignIn | None:
        """The sign-in with that id if it is open and not idle for too long; using it keeps it open."""
        if not signin_id:
            return None
        entry = self._open.get(signin_id)
        if entry is None:
            return None
        signin, last_seen = entry
        now = time.monotonic()
        if now - last_seen > self.idle_seconds:
            del self._open[signin_id]
            return None
        self._open[signin_id] = (signin, now)
        self._open.move_to_end(signin_id)
        return signin

    def end(self, signin_id: str) -> None:
        self._open.pop(signin_id, None)


def csrf_matches(signin: SignIn, sent: str | None) -> bool:
    """Whether the CSRF token sent with a request is the sign-in's (compared in constant time)."""
    return bool(sent) and hmac.compare_digest(signin.csrf.encode(), sent.encode())
