"""The table of open client sessions (`Session`, in `shepherd.graph.sessions`), found by an unguessable session key:
opened per agent under its limits, ended by key, by agent, by advised client or when idle, and the keys of
deleted agents' sessions remembered to answer them 410."""

from __future__ import annotations

import itertools
import time
from typing import Any, Callable, Iterator

from shepherd.graph.runtime import AgentRuntime
from shepherd.graph.sessions import GONE_REMEMBERED, Gone, Session
from shepherd.level import Level
from shepherd.storage import new_secret
from shepherd.wire.sessions import TooManySessions, Unauthorized
from shepherd.wire.steps import DEFAULT_MAX_REWARD


class SessionTable:
    """Open sessions by key. Not thread-safe: the event loop owns it."""

    def __init__(self, max_per_agent: int | None = None, max_reward: float = DEFAULT_MAX_REWARD) -> None:
        self.max_per_agent = max_per_agent
        self.max_reward = max_reward  # each session's bound on rewards (`Serving.max_reward`)
        self._by_key: dict[str, Session] = {}
        self._gone: dict[str, str] = {}  # session keys of deleted agents, and what to tell their clients
        self._actor_ids = itertools.count(1)

    def __len__(self) -> int:
        return len(self._by_key)

    def __iter__(self) -> Iterator[Session]:
        return iter(list(self._by_key.values()))

    def open(self, runtime: AgentRuntime, leveled: Callable[[int], Level], actors: int = 1,
             client_id: str = "") -> Session:
        """Open a session on ``runtime`` whose level ``leveled`` makes from its first actor id (its ``actors``
        envs take the ids from there: `ServedAgent.session_level`).

        Raises:
            TooManySessions: the agent has ``max_per_agent`` sessions already.
        """
        if self.max_per_agent is not None and runtime.sessions >= self.max_per_agent:
            raise TooManySessions(f"agent {runtime.record.name} has its maximum of {self.max_per_agent} "
                                  "sessions; log out unused ones or retry later")
        first = next(self._actor_ids)
        self._actor_ids = itertools.count(first + actors)
        session = Session(new_secret(), leveled(first), runtime, client_id, max_reward=self.max_reward)
        self._by_key[session.key] = session
        runtime.sessions += 1
        return session

    def get(self, key: Any) -> Session:
        """Raises Unauthorized for an unknown or expired session key, Gone for a session whose agent was
        deleted."""
        session = self._by_key.get(key) if isinstance(key, str) else None
        if session is None:
            gone = self._gone.get(key) if isinstance(key, str) else None
            if gone is not None:
                raise Gone(gone)
            raise Unauthorized("unknown or expired session_key; log in again")
        return session

    def end(self, session: Session) -> None:
        """End a session; its unfinished episode is abandoned and the learner closes its partial data."""
        if self._by_key.pop(session.key, None) is not None:
            session.ended = True
            session.level.close()
            session.runtime.sessions -= 1

    def end_agent(self, agent_id: int, gone: str | None = None) -> int:
        """End every session of one agent, and the sessions that consult its learner (a selector's, whose skill
        it is: their clients log in again); returns how many ended. With ``gone`` (the agent was deleted), its own
        sessions' keys get `Gone` with that message from now on, instead of `Unauthorized`."""
        consulting = [s for s in self._by_key.values() if agent_id in s.level.consults]
        for session in consulting:
            self.end(session)
        ending = [s for s in self._by_key.values() if s.runtime.record.id == agent_id]
        for session in ending:
            if gone is not None:  # before it ends: a step waiting in it hears `Gone` too
                session.gone = self._gone[session.key] = gone
            self.end(session)
        while len(self._gone) > GONE_REMEMBERED:  # the oldest first
            del self._gone[next(iter(self._gone))]
        return len(ending) + len(consulting)

    def end_client(self, client_id: str) -> int:
        """End every session opened with one API key (by its `hash_key`); returns how many ended."""
        ending = [s for s in self._by_key.values() if s.client_id == client_id]
        for session in ending:
            self.end(session)
        return len(ending)

    def expire(self, idle_seconds: float) -> int:
        """End sessions with no request for ``idle_seconds``; returns how many ended.

        A request being answered keeps its session alive (its client is there, waiting); a step left
        waiting for its action after its request timed out does not.
        """
        deadline = time.monotonic() - idle_seconds
        stale = [s for s in self._by_key.values() if not s.in_request and s.last_active < deadline]
        for session in stale:
            self.end(session)
        return len(stale)

    def release_idle(self, hold_seconds: float) -> int:
        """Sessions with no request for ``hold_seconds`` hand back the evaluation episodes they hold
        (`Level.release_held`); returns how many episodes were handed back."""
        deadline = time.monotonic() - hold_seconds
        return sum(s.level.release_held() for s in self._by_key.values()
                   if not s.in_request and s.last_active < deadline)

    def end_all(self) -> None:
        for session in list(self._by_key.values()):
            self.end(session)
