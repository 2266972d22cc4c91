"""Environments with roles (docs/how-to/multi-agent.md): several agents in one environment, as plain values.

An environment of a preset names its roles (each played by an agent of the preset, or of the owner's stored
agents, or by a scripted ``"module:function"``), how they take turns, its teams and its self-play settings. This
module is the schema only: `EnvironmentSpec` parsed from a preset's or the store's plain data
(`parse_environments`, every problem with its key path: ``environments[0].teams.red[1]``) and back
(`EnvironmentSpec.to_json`), and the checks that need the agents' definitions (`environment_problems`). The
session shape is ``shepherd/level/roles.py``'s, the login ``shepherd/graph/environments.py``'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from shepherd.definition import AgentDefinition, Sharing, name_problem
from shepherd.hierarchy import load_function

#: how roles take turns: every live role each step, one after another in the declared order, or any one
TURNS = ("simultaneous", "alternate", "any")
ENVIRONMENT_KEYS = ("name", "roles", "turns", "teams", "self_play")
SELF_PLAY_KEYS = ("snapshot_every", "window", "against_latest", "swap_every", "opponents", "opponent_actions")
#: how a snapshot (or the latest policy's frozen copy) plays an opponent: drawing each action from its policy's
#: distribution (ML-Agents' ghost), or its greedy action
OPPONENT_ACTIONS = ("sample", "greedy")
_FUNCTION = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


def is_scripted(player: str) -> bool:
    """Whether a role's player is a scripted ``"module:function"`` rather than an agent's name."""
    return bool(_FUNCTION.fullmatch(player))


@dataclass(frozen=True)
class SelfPlay:
    """ML-Agents' ghost settings: a snapshot every ``snapshot_every`` steps of the learning agent, opponents
    drawn from the last ``window`` snapshots (the latest with probability ``against_latest``) or the scripted
    ``opponents``, the learning role swapped every ``swap_every`` steps; the snapshots' actions drawn from their
    policies' distributions or greedy (``opponent_actions``, `OPPONENT_ACTIONS`)."""

    snapshot_every: int = 10_000
    window: int = 10
    against_latest: float = 0.5
    swap_every: int = 2_000
    opponents: tuple[str, ...] = ()
    opponent_actions: str = "sample"

    def to_json(self) -> dict[str, Any]:
        return {"snapshot_every": self.snapshot_every, "window": self.window, "against_latest": self.against_latest,
                "swap_every": self.swap_every, "opponents": list(self.opponents),
                "opponent_actions": self.opponent_actions}


@dataclass(frozen=True)
class EnvironmentSpec:
    """One environment: its roles in their declared order (role -> the agent or ``"module:function"`` that
    plays it), its turns (`TURNS`), its teams (team -> roles; empty: each role its own team) and self-play."""

    name: str
    roles: Mapping[str, str]
    turns: str = "simultaneous"
    teams: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    self_play: SelfPlay | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "roles", dict(self.roles))
        object.__setattr__(self, "teams", {team: tuple(roles) for team, roles in dict(self.teams).items()})
        if isinstance(self.self_play, dict):
            object.__setattr__(self, "self_play", _self_play(self.self_play, "self_play", []))

    def team_of(self) -> dict[str, str]:
        """Each role's team (a role in no declared team is a team of its own, named as the role)."""
        teams = {role: team for team, roles in self.teams.items() for role in roles}
        return {role: teams.get(role, role) for role in self.roles}

    def agents(self) -> list[str]:
        """The agents that play its roles, each once, in role order (scripted roles left out)."""
        return list(dict.fromkeys(player for player in self.roles.values() if not is_scripted(player)))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "roles": dict(self.roles), "turns": self.turns,
                **({"teams": {team: list(roles) for team, roles in self.teams.items()}} if self.teams else {}),
                **({"self_play": self.self_play.to_json()} if self.self_play is not None else {})}


def parse_environments(value: Any, path: str = "environments") -> tuple[list[EnvironmentSpec], list[tuple[str, str]]]:
    """The environments of a preset's plain data (None: none; `EnvironmentSpec` values as they are), and every
    problem found, as (key path, message)."""
    problems: list[tuple[str, str]] = []
    if value is None:
        return [], problems
    if not isinstance(value, (list, tuple)):
        return [], [(path, "must be a list of environments, each {name, roles, turns}")]
    specs = []
    for index, item in enumerate(value):
        plain = item.to_json() if isinstance(item, EnvironmentSpec) else item  # a Python preset's, checked alike
        spec = _environment(plain, f"{path}[{index}]", problems)
        if spec is not None:
            specs.append(spec)
    seen: set[str] = set()
    for index, spec in enumerate(specs):
        if spec.name in seen:
            problems.append((f"{path}[{index}].name", f"environment {spec.name!r} is declared twice"))
        seen.add(spec.name)
    return specs, problems


def _environment(value: Any, path: str, problems: list[tuple[str, str]]) -> EnvironmentSpec | None:
    if not isinstance(value, dict):
        problems.append((path, "must be a mapping such as {name: duel, roles: {left: a, right: b}, turns: alternate}"))
        return None
    before = len(problems)
    problems.extend((f"{path}.{key}", "unknown key; expected one of " + ", ".join(ENVIRONMENT_KEYS))
                    for key in value if key not in ENVIRONMENT_KEYS)
    name = value.get("name")
    if (bad := name_problem(name, "environment")) is not None:
        problems.append((f"{path}.name", bad))
    roles = value.get("roles")
    if not isinstance(roles, dict) or not roles:
        problems.append((f"{path}.roles", "must be a mapping of role: agent name, with at least one role"))
        roles = {}
    for role, player in roles.items():
        if (bad := name_problem(role, "role")) is not None:
            problems.append((f"{path}.roles.{role}", bad))
        if not isinstance(player, str) or not (is_scripted(player) or name_problem(player, "agent") is None):
            problems.append((f"{path}.roles.{role}", f"must name an agent (or a \"module:function\"), not {player!r}"))
    turns = value.get("turns", "simultaneous")
    if turns not in TURNS:
        problems.append((f"{path}.turns", f"must be one of {', '.join(TURNS)}, not {turns!r}"))
    teams = value.get("teams") or {}
    if not isinstance(teams, dict):
        problems.append((f"{path}.teams", "must be a mapping of team: [role, ...]"))
        teams = {}
    placed: dict[str, str] = {}
    for team, members in teams.items():
        if not isinstance(members, (list, tuple)) or not members:
            problems.append((f"{path}.teams.{team}", "must be a list of at least one role"))
            continue
        for index, role in enumerate(members):
            where = f"{path}.teams.{team}[{index}]"
            if role not in roles:
                problems.append((where, f"names no role of this environment ({', '.join(map(str, roles))})"))
            elif role in placed:
                problems.append((where, f"role {role!r} is in team {placed[role]!r} already"))
            else:
                placed[role] = team
    for team in teams:  # a role in no team is a team named as the role: a declared team of that name merged them
        if team in roles and team not in placed and isinstance(teams[team], (list, tuple)):
            problems.append((f"{path}.teams.{team}", f"is named as role {team!r}, which is in no team: that role "
                                                     "would be a team of its own of the same name (put it in a team, "
                                                     "or name the team otherwise)"))
    self_play = None
    if value.get("self_play") is not None:
        self_play = _self_play(value["self_play"], f"{path}.self_play", problems)
    if len(problems) > before:
        return None
    return EnvironmentSpec(str(name), roles, turns, {team: tuple(members) for team, members in teams.items()}, self_play)


def _self_play(value: Any, path: str, problems: list[tuple[str, str]]) -> SelfPlay | None:
    if not isinstance(value, dict):
        problems.append((path, "must be a mapping such as {snapshot_every: 10000, window: 10, swap_every: 2000}"))
        return None
    before = len(problems)
    problems.extend((f"{path}.{key}", "unknown key; expected one of " + ", ".join(SELF_PLAY_KEYS))
                    for key in value if key not in SELF_PLAY_KEYS)
    numbers = {}
    for key in ("snapshot_every", "window", "swap_every"):
        number = value.get(key, getattr(SelfPlay, key))
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            problems.append((f"{path}.{key}", f"must be a whole number, at least 1, not {number!r}"))
        numbers[key] = number
    latest = value.get("against_latest", SelfPlay.against_latest)
    if isinstance(latest, bool) or not isinstance(latest, (int, float)) or not 0.0 <= latest <= 1.0:
        problems.append((f"{path}.against_latest", f"must be a probability, from 0 to 1, not {latest!r}"))
    opponents = value.get("opponents") or []
    if not isinstance(opponents, (list, tuple)):
        problems.append((f"{path}.opponents", "must be a list of \"module:function\""))
        opponents = []
    for index, opponent in enumerate(opponents):
        if not isinstance(opponent, str) or not is_scripted(opponent):
            problems.append((f"{path}.opponents[{index}]", f"must be \"module:function\", not {opponent!r}"))
    actions = value.get("opponent_actions", SelfPlay.opponent_actions)
    if actions not in OPPONENT_ACTIONS:
        problems.append((f"{path}.opponent_actions", f"must be one of {', '.join(OPPONENT_ACTIONS)}, not {actions!r}"))
    if len(problems) > before:
        return None
    return SelfPlay(numbers["snapshot_every"], numbers["window"], float(latest), numbers["swap_every"], tuple(opponents),
                    actions)


def _unimportable(spec: EnvironmentSpec, where: str) -> list[tuple[str, str]]:
    """The scripted players of ``spec`` (its roles' and its self-play's opponents) that this process cannot
    import: the server imports them at a login, so they are refused at load instead."""
    named = [(f"{where}.roles.{role}", player) for role, player in spec.roles.items() if is_scripted(player)]
    if spec.self_play is not None:
        named += [(f"{where}.self_play.opponents[{i}]", name) for i, name in enumerate(spec.self_play.opponents)]
    problems = []
    for key, name in named:
        try:
            load_function(name)
        except ValueError as error:
            problems.append((key, f"{error}; the server imports it: run it where the module is importable "
                                  "(its folder on PYTHONPATH, or installed)"))
    return problems


def environment_problems(environments: list[EnvironmentSpec], agents: Mapping[str, AgentDefinition],
                         stored: Mapping[str, AgentDefinition] | None = None,
                         path: str = "environments") -> list[tuple[str, str]]:
    """What the agents' definitions refuse in ``environments``: a scripted player this process cannot import, a
    role naming no agent of ``agents`` (the preset's) or of ``stored`` (the owner's in the data folder; None: not
    known yet, such names are checked when it is), and under self-play, roles not played by one agent (or one
    agent per team), or agents whose spaces differ (a snapshot of one plays the other's role)."""
    problems = []
    for index, spec in enumerate(environments):
        where = f"{path}[{index}]"
        problems += _unimportable(spec, where)
        known = {**(stored or {}), **agents}
        missing = False
        for role, player in spec.roles.items():
            if is_scripted(player) or player in known:
                continue
            missing = True
            if stored is not None:
                problems.append((f"{where}.roles.{role}", f"names agent {player!r}, which neither the preset nor "
                                                          "its owner's stored agents have"))
        if missing:
            continue  # without the data folder's agents: checked again with them (`GraphManager.create_graph`)
        for role, player in spec.roles.items():
            definition = None if is_scripted(player) else known[player]
            if definition is not None and (definition.level is not None or definition.sharing is not Sharing.POOLED):
                problems.append((f"{where}.roles.{role}", f"agent {player!r} is "
                                 f"{'a selector' if definition.level is not None else 'advised'}; a role is played "
                                 "by a pooled agent (as one env of it) or a scripted player"))
        if spec.self_play is None:
            continue
        team = spec.team_of()
        by_team: dict[str, set[str]] = {}
        for role, player in spec.roles.items():
            by_team.setdefault(team[role], set()).add(player)
        players = set(spec.roles.values())
        if any(is_scripted(player) for player in players):
            problems.append((f"{where}.self_play", "self-play roles are played by agents (scripted players go in "
                                                   "self_play.opponents)"))
        elif len(players) > 1 and not (spec.teams and all(len(p) == 1 for p in by_team.values())):
            problems.append((f"{where}.self_play", "self-play needs its roles played by one agent, or one agent "
                                                   f"per team; they are played by {', '.join(sorted(players))}"))
        else:
            definitions = [known[player] for player in sorted(players) if player in known]
            spaces = {(repr(d.observation_space), repr(d.action_space)) for d in definitions}
            if len(spaces) > 1:
                problems.append((f"{where}.roles", "under self-play the teams' agents play each other's roles: "
                                                   "their observation and action spaces must be the same"))
    return problems
