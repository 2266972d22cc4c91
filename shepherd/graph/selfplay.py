"""Self-play as ML-Agents' ghost trainer, for an environment whose roles are played by one agent (or one agent per
team): one team learns, the others play a snapshot of their agent drawn from the last ``window`` (the latest
policy with probability ``against_latest``) or a scripted opponent; the learning team changes every
``swap_every`` of its agent's steps, and a snapshot is taken every ``snapshot_every``. An opponent's steps are
not learned from: it plays the frozen snapshot's greedy action (`shepherd.level.episodes.Trial`, the frozen copy
that a trial of another policy plays; the learner answers what the copy cannot)."""

from __future__ import annotations

import collections
import random
import weakref
from typing import Any

from shepherd.agents.core import HasGreedy
from shepherd.agents.greedy_policy import GreedyPolicy
from shepherd.environments import EnvironmentSpec
from shepherd.graph.runtime import AgentRuntime
from shepherd.hierarchy import load_function
from shepherd.level.episodes import Trial


class Ghost:
    """The self-play of one environment: its snapshot pools (one per agent), which team learns, and each
    episode's opponents (`matchup`)."""

    def __init__(self, spec: EnvironmentSpec, runtimes: dict[str, AgentRuntime], seed: int) -> None:
        assert spec.self_play is not None
        self.spec = spec
        self.play = spec.self_play
        self.team = spec.team_of()
        self.teams = list(dict.fromkeys(self.team[role] for role in spec.roles))
        self.runtimes = runtimes  # by role
        self.random = random.Random(seed)
        #: each agent's snapshots, newest last: (policy version, its frozen greedy policy)
        self.pools: dict[str, collections.deque[tuple[int, GreedyPolicy]]] = {}
        self._taken: dict[str, int] = {}  # the agent's steps at its last snapshot
        self.learning = 0  # the index of the team that learns
        self._swap_at: int | None = None
        self.scripts = {name: load_function(name) for name in self.play.opponents}

    def _steps(self, team: str) -> int:
        role = next(role for role in self.spec.roles if self.team[role] == team)
        return self.runtimes[role].tracker.steps

    def _snapshot(self, runtime: AgentRuntime) -> None:
        name = runtime.record.name
        pool = self.pools.setdefault(name, collections.deque(maxlen=self.play.window))
        steps = runtime.tracker.steps
        if pool and steps - self._taken.get(name, 0) < self.play.snapshot_every:
            return
        greedy = runtime.learner.greedy if isinstance(runtime.learner, HasGreedy) else None
        if greedy is None:
            return
        frozen = greedy.frozen()
        if frozen is None:
            greedy.prepare()  # published by the next episode
            return
        pool.append((frozen.source.version, frozen))
        self._taken[name] = steps

    def matchup(self) -> dict[str, tuple[str, Any]]:
        """A new episode's opponents: for every role of a team that does not learn now, its label (``latest``,
        ``snapshot:V``, or the scripted ``module:function``) and what plays it (a `Trial` of a frozen policy, or
        the function). The roles of the learning team are left out."""
        for runtime in {id(r): r for r in self.runtimes.values()}.values():
            self._snapshot(runtime)
        learning = self.teams[self.learning]
        steps = self._steps(learning)
        if self._swap_at is None:
            self._swap_at = steps + self.play.swap_every
        elif steps >= self._swap_at and len(self.teams) > 1:
            self.learning = (self.learning + 1) % len(self.teams)
            learning = self.teams[self.learning]
            self._swap_at = self._steps(learning) + self.play.swap_every
        chosen: dict[str, tuple[str, Any]] = {}
        for team in self.teams:
            if team == learning:
                continue
            roles = [role for role in self.spec.roles if self.team[role] == team]
            runtime = self.runtimes[roles[0]]
            pool = list(self.pools.get(runtime.record.name, ()))
            choices: list[tuple[str, Any]] = [(f"snapshot:{version}", policy) for version, policy in pool]
            choices += list(self.scripts.items())
            if not choices or self.random.random() < self.play.against_latest:
                label, player = "latest", Trial("latest", runtime.learner)  # frozen at its first act: the latest
            else:
                label, picked = self.random.choice(choices)
                if callable(picked) and not isinstance(picked, GreedyPolicy):
                    player = picked
                else:
                    player = Trial(label, runtime.learner)
                    player.frozen = picked
            for role in roles:
                chosen[role] = (label, player)
        return chosen


_GHOSTS: weakref.WeakKeyDictionary[AgentRuntime, dict[str, Ghost]] = weakref.WeakKeyDictionary()


def ghost_of(spec: EnvironmentSpec, runtimes: dict[str, AgentRuntime]) -> Ghost | None:
    """The self-play of ``spec`` (None: it has none), one per environment and served agent, shared by its
    sessions (kept with its first role's runtime: a restarted agent starts a new one)."""
    if spec.self_play is None:
        return None
    first = runtimes[next(iter(spec.roles))]
    ghosts = _GHOSTS.setdefault(first, {})
    ghost = ghosts.get(spec.name)
    if ghost is None:
        seed = first.record.parameters.get("seed")
        ghost = ghosts[spec.name] = Ghost(spec, runtimes, seed if isinstance(seed, int) else first.record.id)
    return ghost
