"""Ratings of the players of environments with roles, from their episodes' outcomes (openskill's Plackett-Luce:
teams of any size, any number of teams), and each agent's rating over its steps (a bounded history), kept with the
self-play of those environments (`shepherd.graph.selfplay`) in the checkpoint of the agent that holds them (the
environment's first role's agent: `shepherd.graph.environments`), so that a restart, even after ``kill -9``,
resumes the ratings, histories and snapshot pools of its last checkpoint."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Mapping, Protocol

#: openskill's defaults: a new player's mean and uncertainty
MU, SIGMA = 25.0, 25.0 / 3.0
#: the most points an agent's rating history keeps: one more drops every other point, and points are taken half as
#: often from then on, so that the history spans the whole run at any length
HISTORY_POINTS = 200


class Kept(Protocol):
    """What is checkpointed beside the ratings (an environment's self-play): its plain state, and the write of the
    checkpoint that holds the state taken last (the files it keeps beside the checkpoint age by it)."""

    def state(self) -> dict[str, Any]: ...

    def written_by(self, checkpoint: Future) -> None: ...


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


@dataclass(frozen=True)
class Point:
    """An agent's rating after one of its rated episodes, at its steps then."""

    steps: int
    rating: Rating

    def to_json(self) -> dict[str, Any]:
        return {"steps": self.steps, **self.rating.to_json()}


class History:
    """An agent's rating over its steps in one environment: a point every ``stride`` rated episodes (its games a
    multiple of ``stride``), at most `HISTORY_POINTS` (past them, the stride doubles and the points off it go)."""

    def __init__(self, stride: int = 1, points: list[Point] | None = None) -> None:
        self.stride = stride
        self.points = points or []

    def add(self, steps: int, rating: Rating) -> None:
        if rating.games % self.stride:
            return
        self.points.append(Point(steps, rating))
        if len(self.points) > HISTORY_POINTS:
            self.stride *= 2
            self.points = [point for point in self.points if point.rating.games % self.stride == 0]

    def state(self) -> dict[str, Any]:
        return {"stride": self.stride, "points": [[p.steps, p.rating.games, p.rating.mu, p.rating.sigma]
                                                  for p in self.points]}

    @classmethod
    def of_state(cls, state: Any) -> History:
        return cls(int(state["stride"]), [Point(int(steps), Rating(float(mu), float(sigma), int(games)))
                                          for steps, games, mu, sigma in state["points"]])


class Ratings:
    """The ratings an agent keeps, by environment and player (an agent's name, a snapshot's ``agent@snapshot:V``
    or a scripted ``module:function``), each agent's rating history (`History`), and the self-play it
    checkpoints with them. Rated on the event loop; a lock keeps each read whole."""

    def __init__(self) -> None:
        self._tables: dict[str, dict[str, Rating]] = {}
        self._histories: dict[str, dict[str, History]] = {}  # by environment and agent
        self._lock = threading.Lock()
        #: each environment's self-play, checkpointed with the ratings (`keep`)
        self.kept: dict[str, Kept] = {}
        self._restored: dict[str, Any] = {}  # the self-play states of the checkpoint, until each is kept again

    def keep(self, environment: str, kept: Kept) -> Any:
        """Checkpoint ``kept`` (an environment's self-play) with the ratings from now on; returns the state the
        last checkpoint held for it (None: none), to resume from."""
        self.kept[environment] = kept
        return self._restored.pop(environment, None)

    def rate(self, environment: str, teams: Mapping[str, list[str]], scores: Mapping[str, float],
             steps: Mapping[str, int] | None = None) -> bool:
        """Rate one episode of ``environment``: each team's players and score (higher is better). Returns whether
        it rated: an episode where one player is on two teams (the same agent on both sides, without snapshots)
        says nothing of its strength and is not rated. ``steps``: the session's agents, by name, and their steps
        now: a point of the rating history of each that played."""
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
            histories = self._histories.setdefault(environment, {})
            for player, at in (steps or {}).items():
                if player in seen:  # an agent that played this episode (not one whose snapshot did)
                    histories.setdefault(player, History()).add(at, table[player])
        return True

    def environments(self) -> list[str]:
        """The environments it has ratings of."""
        with self._lock:
            return sorted(self._tables)

    def table(self, environment: str) -> dict[str, Rating]:
        with self._lock:
            return dict(self._tables.get(environment, {}))

    def history(self, environment: str) -> dict[str, list[Point]]:
        """Each agent's rating over its steps in ``environment`` (its latest policy's: a snapshot has none)."""
        with self._lock:
            return {player: list(history.points)
                    for player, history in sorted(self._histories.get(environment, {}).items())}

    def state(self) -> dict[str, Any]:
        """The plain form a checkpoint holds (`load` reads it back): the ratings and histories by environment, and
        each environment's self-play (`keep`). Taken on the event loop, where the self-play changes."""
        with self._lock:
            tables = {environment: {player: {"mu": r.mu, "sigma": r.sigma, "games": r.games}
                                    for player, r in sorted(table.items())}
                      for environment, table in sorted(self._tables.items())}
            histories = {environment: {player: history.state() for player, history in sorted(players.items())}
                         for environment, players in sorted(self._histories.items()) if players}
        selfplay = {**self._restored, **{environment: kept.state() for environment, kept in self.kept.items()}}
        return {**({"tables": tables} if tables else {}), **({"histories": histories} if histories else {}),
                **({"selfplay": dict(sorted(selfplay.items()))} if selfplay else {})}

    def written_by(self, checkpoint: Future) -> None:
        """``checkpoint`` writes the `state` taken last: what each self-play keeps beside it ages by that write."""
        for kept in self.kept.values():
            kept.written_by(checkpoint)

    def load(self, state: Any) -> None:
        """The ratings and self-play states of a checkpoint's `state` (None or malformed: none)."""
        tables: dict[str, dict[str, Rating]] = {}
        state = state if isinstance(state, dict) else {}
        for environment, table in (state.get("tables") or {}).items():
            if isinstance(table, dict):
                tables[environment] = {player: Rating(float(r["mu"]), float(r["sigma"]), int(r["games"]))
                                       for player, r in table.items() if isinstance(r, dict)}
        histories = {environment: {player: History.of_state(history) for player, history in players.items()
                                   if isinstance(history, dict)}
                     for environment, players in (state.get("histories") or {}).items() if isinstance(players, dict)}
        with self._lock:
            self._tables = tables
            self._histories = histories
        self._restored = dict(state.get("selfplay") or {})
