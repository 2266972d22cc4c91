"""Self-play as ML-Agents' ghost trainer, for an environment whose roles are played by one agent (or one agent per
team): one team learns, the others play a snapshot of their agent drawn from the last ``window`` (the latest
policy with probability ``against_latest``) or a scripted opponent; the learning team changes every
``swap_every`` of its agent's steps, and a snapshot is taken every ``snapshot_every``. An opponent's steps are
not learned from: it plays the frozen snapshot (`shepherd.level.episodes.Trial`, the frozen copy that a trial of
another policy plays; the learner answers what the copy cannot, greedily), drawing each action from the
policy's distribution as ML-Agents' ghost does (``opponent_actions: sample``; a deterministic game's greedy
opponents would repeat the same lines), or its greedy action (``greedy``)."""

from __future__ import annotations

import base64
import collections
import logging
import random
from typing import Any

import numpy as np

from shepherd.agents.core import HasGreedy, VersionedWeights
from shepherd.agents.greedy_policy import MAX_WEIGHTS, FixedWeights, GreedyPolicy
from shepherd.environments import EnvironmentSpec
from shepherd.graph.runtime import AgentRuntime
from shepherd.hierarchy import load_function
from shepherd.level.episodes import Trial

logger = logging.getLogger(__name__)


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
        for runtime in {id(r): r for r in runtimes.values()}.values():
            if not isinstance(runtime.learner, HasGreedy) or runtime.learner.greedy is None:
                # said once, when the environment's self-play starts: otherwise its episodes would all be against
                # the latest policy with nothing telling why the pool stays empty
                logger.warning("environment %s: agent %s has no numpy greedy copy of its policy (images through "
                               "a CNN, a recurrent policy, or over %d weights): its self-play takes no snapshots; "
                               "every episode is against its latest policy%s", spec.name, runtime.record.name,
                               MAX_WEIGHTS, " or a scripted opponent" if self.scripts else "")

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
            if not choices or self.random.random() < self.play.against_latest:  # frozen at its first act
                label, player = "latest", Trial("latest", runtime.learner, sample=self._sampler())
            else:
                label, picked = self.random.choice(choices)
                if callable(picked) and not isinstance(picked, GreedyPolicy):
                    player = picked
                else:
                    player = Trial(label, runtime.learner, sample=self._sampler())
                    player.frozen = picked
            for role in roles:
                chosen[role] = (label, player)
        return chosen

    def _sampler(self) -> np.random.Generator | None:
        """An opponent's generator for its sampled actions (None: greedy), seeded from the checkpointed `random`
        so that a resumed self-play draws as the one it resumes."""
        if self.play.opponent_actions != "sample":
            return None
        return np.random.default_rng(self.random.getrandbits(64))

    # -- the checkpoint ------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Its plain form, checkpointed with the ratings (`Ratings.keep`): the pools (each snapshot's version and
        weights), when each agent's last snapshot was taken, the learning team, the next swap, the generator."""
        return {"pools": {name: [{"version": version, "arrays": _encoded(_arrays(policy))}
                                 for version, policy in pool] for name, pool in sorted(self.pools.items())},
                "taken": dict(sorted(self._taken.items())), "learning": self.learning, "swap_at": self._swap_at,
                "random": _plain(self.random.getstate())}

    def load(self, state: dict[str, Any]) -> None:
        """Resume from `state`'s: each snapshot a frozen policy of its agent's network with its weights (and the
        agent's observation statistics of now: those of the snapshot's time are not kept)."""
        runtimes = {runtime.record.name: runtime for runtime in self.runtimes.values()}
        for name, snapshots in state.get("pools", {}).items():
            runtime = runtimes.get(name)
            greedy = None if runtime is None or not isinstance(runtime.learner, HasGreedy) else runtime.learner.greedy
            if greedy is None:
                continue
            pool = self.pools.setdefault(name, collections.deque(maxlen=self.play.window))
            for snapshot in snapshots:
                weights = VersionedWeights(int(snapshot["version"]), _decoded(snapshot["arrays"]))
                pool.append((weights.version, GreedyPolicy(greedy.network, FixedWeights(weights), greedy.actions,
                                                           greedy.name, None if greedy.filtering is None
                                                           else greedy.filtering.frozen())))
        self._taken = {name: int(steps) for name, steps in state.get("taken", {}).items()}
        self.learning = int(state.get("learning", 0)) % len(self.teams)
        self._swap_at = state.get("swap_at")
        if state.get("random") is not None:
            self.random.setstate(_tupled(state["random"]))


def ghost_of(spec: EnvironmentSpec, runtimes: dict[str, AgentRuntime]) -> Ghost | None:
    """The self-play of ``spec`` (None: it has none), one per environment and served agent, shared by its
    sessions: kept by its first role's runtime with its ratings (`Ratings.keep`), and resumed from its
    checkpoint (a restarted agent starts a new one from the checkpoint it resumes)."""
    if spec.self_play is None:
        return None
    first = runtimes[next(iter(spec.roles))]
    ghost = first.ratings.kept.get(spec.name)
    if not isinstance(ghost, Ghost):
        seed = first.record.parameters.get("seed")
        ghost = Ghost(spec, runtimes, seed if isinstance(seed, int) else first.record.id)
        restored = first.ratings.keep(spec.name, ghost)
        if isinstance(restored, dict):
            ghost.load(restored)
    return ghost


def _arrays(policy: GreedyPolicy) -> Any:
    weights = policy.source.latest_weights()
    assert weights is not None, "a snapshot without weights"
    return weights.arrays


def _encoded(arrays: Any) -> dict[str, Any]:
    return {name: {"dtype": np.asarray(array).dtype.str, "shape": list(np.shape(array)),
                   "data": base64.b64encode(np.ascontiguousarray(array).tobytes()).decode()}
            for name, array in sorted(arrays.items())}


def _decoded(arrays: dict[str, Any]) -> dict[str, np.ndarray]:
    return {name: np.frombuffer(base64.b64decode(item["data"]), dtype=np.dtype(item["dtype"]))
            .reshape(item["shape"]).copy() for name, item in arrays.items()}


def _plain(value: Any) -> Any:
    return [_plain(item) for item in value] if isinstance(value, (tuple, list)) else value


def _tupled(value: Any) -> Any:
    return tuple(_tupled(item) for item in value) if isinstance(value, list) else value
