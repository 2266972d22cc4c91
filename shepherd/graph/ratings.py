"""Ratings of the players of environments with roles, from their episodes' outcomes (openskill's Plackett-Luce:
teams of any size, any number of teams), kept with the self-play of those environments (`shepherd.graph.selfplay`)
in the checkpoint of the agent that holds them (the environment's first role's agent:
`shepherd.graph.environments`), so that a restart, even after ``kill -9``, resumes the ratings and the snapshot
pools of its last checkpoint."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Mapping, Protocol

#: openskill's defaults: a new player's mean and uncertainty
MU, SIGMA = 25.0, 25.0 / 3.0


class Kept(Protocol):
    """What is checkpointed beside the ratings (an environment's self-play): its plain state."""

    def state(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Rating:
    """One player's rating: openskill's mean and uncertainty, its ordinal (mu - 3 sigma, what a table sorts by)
    and the rated episodes it played."""

    mu: float = MU
    sigma: float = SIGMA
    games: int = 0

    @property
    def ordinal(self) -> float:
        return self.mu - 3.0 * self.sigma

    def to_json(self) -> dict[str, Any]:
        return {"mu": self.mu, "sigma": self.sigma, "games": self.games, "ordinal": self.ordinal}


class Ratings:
    """The ratings an agent keeps, by environment and player (an agent's name, a snapshot's ``agent@snapshot:V``
    or a scripted ``module:function``), and the self-play it checkpoints with them. Rated on the event loop;
    a lock keeps each read whole."""

    def __init__(self) -> None:
        self._tables: dict[str, dict[str, Rating]] = {}
        self._lock = threading.Lock()
        #: each environment's self-play, checkpointed with the ratings (`keep`)
        self.kept: dict[str, Kept] = {}
        self._restored: dict[str, Any] = {}  # the self-play states of the checkpoint, until each is kept again

    def keep(self, environment: str, kept: Kept) -> Any:
        """Checkpoint ``kept`` (an environment's self-play) with the ratings from now on; returns the state the
        last checkpoint held for it (None: none), to resume from."""
        self.kept[environment] = kept
        return self._restored.pop(environment, None)

    def rate(self, environment: str, teams: Mapping[str, list[str]], scores: Mapping[str, float]) -> bool:
        """Rate one episode of ``environment``: each team's players and score (higher is better). Returns whether
        it rated: an episode where one player is on two teams (the same agent on both sides, without snapshots)
        says nothing of its strength and is not rated."""
        names = list(teams)
        players = [list(dict.fromkeys(teams[name])) for name in names]
        seen = [player for team in players for player in team]
        if len(names) < 2 or len(seen) != len(set(seen)):
            return False
        from openskill.models import PlackettLuce  # imported when first rated: a server without roles never pays

        model = PlackettLuce()
        with self._lock:
            table = self._tables.setdefault(environment, {})
            before = [[table.get(player, Rating()) for player in team] for team in players]
            rated = model.rate([[model.rating(mu=r.mu, sigma=r.sigma) for r in team] for team in before],
                               scores=[float(scores[name]) for name in names])
            for team, old, new in zip(players, before, rated):
                for player, was, now in zip(team, old, new):
                    table[player] = Rating(float(now.mu), float(now.sigma), was.games + 1)
        return True

    def environments(self) -> list[str]:
        """The environments it has ratings of."""
        with self._lock:
            return sorted(self._tables)

    def table(self, environment: str) -> dict[str, Rating]:
        with self._lock:
            return dict(self._tables.get(environment, {}))

    def state(self) -> dict[str, Any]:
        """The plain form a checkpoint holds (`load` reads it back): the ratings by environment, and each
        environment's self-play (`keep`). Taken on the event loop, where the self-play changes."""
        with self._lock:
            tables = {environment: {player: {"mu": r.mu, "sigma": r.sigma, "games": r.games}
                                    for player, r in sorted(table.items())}
                      for environment, table in sorted(self._tables.items())}
        selfplay = {**self._restored, **{environment: kept.state() for environment, kept in self.kept.items()}}
        return {**({"tables": tables} if tables else {}),
                **({"selfplay": dict(sorted(selfplay.items()))} if selfplay else {})}

    def load(self, state: Any) -> None:
        """The ratings and self-play states of a checkpoint's `state` (None or malformed: none)."""
        tables: dict[str, dict[str, Rating]] = {}
        state = state if isinstance(state, dict) else {}
        for environment, table in (state.get("tables") or {}).items():
            if isinstance(table, dict):
                tables[environment] = {player: Rating(float(r["mu"]), float(r["sigma"]), int(r["games"]))
                                       for player, r in table.items() if isinstance(r, dict)}
        with self._lock:
            self._tables = tables
        self._restored = dict(state.get("selfplay") or {})
