"""The table of open client sessions: one LevelManager each, found by an unguessable session key."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Any, Iterator

from shepherd.graph.runtime import AgentRuntime
from shepherd.level import LevelManager
from shepherd.storage import new_secret


class Unauthorized(PermissionError):
    """An unknown or revoked API key, or an unknown or expired session key."""


@dataclass(eq=False)
class Session:
    """One client's connection to one agent, between login and logout (or expiry)."""

    key: str
    level: LevelManager
    runtime: AgentRuntime
    busy: bool = False  # a step is waiting for its action


class SessionTable:
    """Open sessions by key. Not thread-safe: the event loop owns it."""

    def __init__(self) -> None:
        self._by_key: dict[str, Session] = {}
        self._actor_ids = itertools.count(1)

    def __len__(self) -> int:
        return len(self._by_key)

    def __iter__(self) -> Iterator[Session]:
        return iter(list(self._by_key.values()))

    def open(self, runtime: AgentRuntime, evaluate_only: bool = False) -> Session:
        level = LevelManager(next(self._actor_ids), runtime, evaluate_only)
        session = Session(new_secret(), level, runtime)
        self._by_key[session.key] = session
        runtime.sessions += 1
        return session

    def get(self, key: Any) -> Session:
        """Raises Unauthorized for an unknown or expired session key."""
        session = self._by_key.get(key) if isinstance(key, str) else None
        if session is None:
            raise Unauthorized("unknown or expired session_key; log in again")
        return session

    def end(self, session: Session) -> None:
        """End a session; its unfinished episode is abandoned and the learner closes its partial data."""
        if self._by_key.pop(session.key, None) is not None:
            session.level.close()
            session.runtime.sessions -= 1

    def end_agent(self, agent_id: int) -> int:
        """End every session of one agent; returns how many ended."""
        ending = [s for s in self._by_key.values() if s.runtime.record.id == agent_id]
        for session in ending:
            self.end(session)
        return len(ending)

    def expire(self, idle_seconds: float) -> int:
        """End sessions idle for longer than ``idle_seconds``; returns how many ended."""
        deadline = time.monotonic() - idle_seconds
        stale = [s for s in self._by_key.values() if not s.busy and s.level.last_active < deadline]
        for session in stale:
            self.end(session)
        return len(stale)

    def end_all(self) -> None:
        for session in list(self._by_key.values()):
            self.end(session)
