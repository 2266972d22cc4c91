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
    """Open sign-ins by id, ended after ``idle_seconds`` without a request. Each credential (the hash of
    the token signed in with) keeps at most ``per_credential`` sign-ins: its own least recently used one is
    ended for a new one, never another credential's, so no key holder can sign anyone else out. Only a
    valid credential opens a sign-in, so the table holds at most ``per_credential`` times the number of
    credentials in the store. Not thread-safe: the event loop owns it."""

    def __init__(self, idle_seconds: float = 8 * 3600.0, per_credential: int = 32) -> None:
        self.idle_seconds = idle_seconds
        self.per_credential = per_credential
        self._open: dict[str, tuple[SignIn, float]] = {}
        self._by_digest: dict[str, collections.OrderedDict[str, None]] = {}  # digest -> ids, oldest first

    def __len__(self) -> int:
        return len(self._open)

    def open(self, digest: str) -> SignIn:
        signin = SignIn(new_secret(), digest, new_secret())
        self._open[signin.id] = (signin, time.monotonic())
        ids = self._by_digest.setdefault(digest, collections.OrderedDict())
        ids[signin.id] = None
        while len(ids) > self.per_credential:
            oldest, _ = ids.popitem(last=False)
            del self._open[oldest]
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
            self.end(signin_id)
            return None
        self._open[signin_id] = (signin, now)
        self._by_digest[signin.digest].move_to_end(signin_id)
        return signin

    def end(self, signin_id: str) -> None:
        entry = self._open.pop(signin_id, None)
        if entry is None:
            return
        ids = self._by_digest[entry[0].digest]
        ids.pop(signin_id, None)
        if not ids:
            del self._by_digest[entry[0].digest]


def csrf_matches(signin: SignIn, sent: str | None) -> bool:
    """Whether the CSRF token sent with a request is the sign-in's (compared in constant time)."""
    return sent is not None and bool(sent) and hmac.compare_digest(signin.csrf.encode(), sent.encode("utf-8", "surrogatepass"))
