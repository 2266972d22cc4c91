"""Environments with roles in the graph: a preset's stored so that a key can be made for each, and the session a
login with an environment's key opens (each role one actor of the served agent that plays it, or a scripted
function; the level is `shepherd.level.roles.RolesLevel`)."""

from __future__ import annotations

import zipfile
from typing import Any, Callable

from shepherd.agents import AgentClosed, AgentFailed, checkpoint
from shepherd.definition import Sharing
from shepherd.environments import EnvironmentSpec, is_scripted, parse_environments
from shepherd.graph.agent import ServedAgent
from shepherd.graph.ratings import Ratings
from shepherd.graph.runtime import AgentRuntime
from shepherd.graph.selfplay import ghost_of
from shepherd.graph.served import ServedAgents
from shepherd.hierarchy import load_function
from shepherd.level import Level
from shepherd.level.roles import Role, RolesLevel
from shepherd.level.roles_vector import RolesVectorLevel
from shepherd.storage import EnvironmentRecord, Store
from shepherd.wire.sessions import Unauthorized


def store_environments(store: Store, owner_id: int, environments: tuple[EnvironmentSpec, ...]) -> dict[str, str]:
    """Store a preset's environments (their definitions replaced when changed); returns a key for each new one,
    by ``"environment NAME"`` (shown once, as an agent's first key is)."""
    created = {}
    for spec in environments:
        record, new = store.put_environment(owner_id, spec.name, spec.to_json())
        if new:
            created[f"environment {spec.name}"], _ = store.add_environment_key(record.id, "created by preset")
    return created


def environment_ratings(record: EnvironmentRecord, served: ServedAgents) -> dict[str, Any] | None:
    """The ratings of an environment's players, best first, and each agent's rating over its steps:
    ``{"ratings": {player: rating}, "history": {agent: [point, ...]}}``; those its first role's agent holds (served
    here) or its last checkpoint held (not served; None: it has none, or none readable)."""
    spec = spec_of(record)
    agents = spec.agents()
    if not agents:
        return None
    agent = served.by_name(record.owner_id, agents[0])
    if agent is not None:
        if agent.runtime is None:
            return None
        ratings = agent.runtime.ratings
    else:
        stored = served.store.find_agent(record.owner_id, agents[0])
        if stored is None:
            return None
        ratings = Ratings()
        try:
            ratings.load(checkpoint.read_state(served.model_path(stored.id)).get("ratings"))
        except (OSError, KeyError, ValueError, TypeError, zipfile.BadZipFile):
            return None  # no checkpoint yet, or one that cannot be read
    table = ratings.table(spec.name)
    return {"ratings": {player: rating.to_json() for player, rating in
                        sorted(table.items(), key=lambda item: item[1].ordinal, reverse=True)},
            "history": {player: [point.to_json() for point in points]
                        for player, points in ratings.history(spec.name).items()}}


def spec_of(record: EnvironmentRecord) -> EnvironmentSpec:
    """The stored environment's spec. Raises AgentFailed when the stored definition no longer reads."""
    specs, problems = parse_environments([record.definition])
    if problems or not specs:
        raise AgentFailed(f"environment {record.name}: its stored definition is not valid ({problems})")
    return specs[0]


def environment_session(record: EnvironmentRecord, served: ServedAgents, evaluate_only: bool,
                        n_envs: int | None = None) -> tuple[AgentRuntime, Callable[[int], Level], int]:
    """The session of a login with ``record``'s key: the runtime it is counted on (its first agent's), its level
    from its first actor id, and how many actor ids it takes (one per role, of each of ``n_envs`` copies; None:
    one copy, stepped without ``envs``).

    Raises:
        Unauthorized: a role's agent is not served here.
        AgentFailed, AgentClosed: a role's agent failed or is restarting.
    """
    spec = spec_of(record)
    players: dict[str, tuple[AgentRuntime | None, Callable[..., object] | None]] = {}
    agents: dict[str, ServedAgent] = {}
    for role, player in spec.roles.items():
        if is_scripted(player):
            try:
                players[role] = (None, load_function(player))
            except ValueError as error:
                raise AgentFailed(f"environment {spec.name}: role {role}: {error}") from None
            continue
        agent = served.by_name(record.owner_id, player)
        if agent is None:
            stored = served.store.find_agent(record.owner_id, player)
            if stored is not None and served.restarting(stored.id):  # as a login with the agent's own key says
                raise AgentClosed(f"agent {player} (role {role}) is restarting; log in again in a moment")
            if stored is not None and stored.id in served.failures:
                raise AgentFailed(f"agent {player} (role {role}) failed ({served.failures[stored.id]}); an admin "
                                  "can restart it")
            raise Unauthorized(f"environment {spec.name}: role {role}'s agent {player} is not served by this server")
        if agent.record.definition.level is not None or agent.record.definition.sharing is not Sharing.POOLED:
            raise AgentFailed(f"environment {spec.name}: role {role}'s agent {player} is "
                              f"{'a selector' if agent.record.definition.level is not None else 'advised'}; a role "
                              "is played by a pooled agent")
        agents[player] = agent
        runtime = agent.session_runtime(None, evaluate_only)
        if runtime.learner.failure is not None:
            raise AgentFailed(f"agent {runtime.label} (role {role}) failed ({runtime.learner.failure}); an admin "
                              "can restart it")
        players[role] = (runtime, None)
    counted = next((runtime for runtime, _ in players.values() if runtime is not None), None)
    if counted is None:
        raise AgentFailed(f"environment {spec.name}: no role is played by an agent")

    consults = frozenset(agent.record.id for agent in agents.values())  # a restart of any ends the session

    team = spec.team_of()
    ratings = counted.ratings  # the environment's ratings live with its first agent's checkpoint

    def rate(teams: dict[str, list[str]], scores: dict[str, float]) -> bool:
        steps = {host.record.name: host.tracker.steps for host, _ in players.values() if host is not None}
        rated = ratings.rate(spec.name, teams, scores, steps)  # the agents' steps, for their rating histories
        if rated:
            counted.changed()  # kept even while its agent takes no step (the other team learns, or evaluate mode)
        return rated

    ghost = ghost_of(spec, {role: host for role, (host, _) in players.items() if host is not None})

    def copy(first: int, group: int) -> RolesLevel:
        roles = [Role(role, spec.roles[role], first + index, host, script, team=team[role])
                 for index, (role, (host, script)) in enumerate(players.items())]
        return RolesLevel(spec.name, spec.turns, roles, evaluate_only, rate,
                          None if ghost is None else ghost.matchup, group)

    def level(first: int) -> Level:
        # the copies of a vector session are one group to the learners (`Request.group`): a role waiting for its
        # turn in one copy holds its segment until the session's next step, which waits for every copy's act
        made: Level = copy(first, first) if n_envs is None else RolesVectorLevel(
            [copy(first + index * len(players), first) for index in range(n_envs)])
        made.consults = consults
        return made

    return counted, level, len(players) * (n_envs or 1)
