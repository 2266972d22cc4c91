"""The GraphManager: a preset's agents and schedule, and the sessions of the clients that drive them."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from shepherd.agents import (ParameterError, algorithm_info, build_learner, check_parameters, check_spaces,
                             registry_records)
from shepherd.graph.runtime import AgentRuntime
from shepherd.graph.schedule import EvaluationResult, Schedule
from shepherd.graph.sessions import Session, SessionTable, Unauthorized
from shepherd.spaces import SpaceError, parse_space, space_to_json
from shepherd.storage import AgentRecord, Store

logger = logging.getLogger(__name__)


class PresetError(ValueError):
    """A preset (or a stored agent) is not valid; the message says what to fix."""


class Conflict(RuntimeError):
    """The request clashes with the session's state (for example, a step while one is in flight)."""


@dataclass(frozen=True)
class AgentSpec:
    """An agent declared by a preset: algorithm, spaces in Shepherd's JSON syntax, parameter values."""

    name: str
    algorithm: str
    observation_space: Any
    action_space: Any
    parameters: dict[str, Any] = field(default_factory=dict)
    sharing: str = "pooled"


@dataclass(frozen=True)
class PresetValidation:
    """Coach's PresetValidationParameters: the env that proves the preset, and what it must reach."""

    env_id: str
    target_return: float
    max_steps: int
    clients: int = 1
    agent: str | None = None  # which agent the local clients drive; the first by default
    timeout_seconds: float = 900.0
    env_kwargs: dict[str, Any] = field(default_factory=dict)


class GraphManager:
    """Holds a preset's agents and schedule; serves them to client sessions once `create_graph` ran.

    Building one does no I/O and starts nothing, so presets can be listed and checked cheaply.
    """

    def __init__(self, agents: list[AgentSpec], schedule: Schedule | None = None,
                 validation: PresetValidation | None = None, owner: str = "shepherd",
                 description: str = "") -> None:
        self.agents = list(agents)
        self.schedule = schedule or Schedule()
        self.validation = validation
        self.owner = owner
        self.description = description
        self.name = ""
        self.store: Store | None = None
        self.runtimes: dict[int, AgentRuntime] = {}
        self.sessions = SessionTable()
        self.evaluation_listeners: list[Callable[[AgentRuntime, EvaluationResult], None]] = []

    # -- checking ------------------------------------------------------------------------------
    def check(self) -> None:
        """Check the preset without building anything heavy.

        Raises:
            PresetError: an unknown algorithm, a bad space, a bad parameter, or an impossible schedule.
        """
        if not self.agents:
            raise PresetError("a preset needs at least one agent")
        names = [spec.name for spec in self.agents]
        if len(set(names)) != len(names):
            raise PresetError("agent names in a preset must be unique")
        for spec in self.agents:
            where = f"agent {spec.name!r}"
            try:
                info = algorithm_info(spec.algorithm)
                check_spaces(spec.algorithm, parse_space(spec.observation_space, "observation_space"),
                             parse_space(spec.action_space, "action_space"))
                check_parameters(spec.algorithm, spec.parameters)
            except (ParameterError, SpaceError) as error:
                raise PresetError(f"{where}: {error}") from None
            if spec.sharing != "pooled":
                raise PresetError(f"{where}: knowledge sharing {spec.sharing!r} is not available; use 'pooled'")
            starts = spec.parameters.get("learning_starts")
            if not info.on_policy and starts is not None and int(starts) != self.schedule.heatup_steps:
                raise PresetError(f"{where}: learning_starts is the schedule's heatup_steps "
                                  f"({self.schedule.heatup_steps}); set heatup_steps instead")
            if info.on_policy and self.schedule.heatup_steps:
                raise PresetError(f"{where}: heatup_steps is for off-policy algorithms (their replay buffer); "
                                  f"{info.name} learns only from its own policy's actions, so set it to 0")
        if self.validation is not None and self.validation.agent not in (None, *names):
            raise PresetError(f"validation names agent {self.validation.agent!r}, which the preset lacks")

    # -- building ------------------------------------------------------------------------------
    def create_graph(self, store: Store) -> dict[str, str]:
        """Create what the preset declares in the store and start its agents (resuming checkpoints).

        Returns the API keys created now, by agent name (shown once; the store keeps only hashes).

        Raises:
            PresetError: the preset is invalid or contradicts what the store holds.
        """
        self.check()
        self.store = store
        store.put_algorithms(*registry_records())
        owner = store.ensure_user(self.owner)
        created_keys = {}
        for spec in self.agents:
            record = store.find_agent(owner.id, spec.name)
            parameters = check_parameters(spec.algorithm, spec.parameters)
            if record is None:
                record = store.add_agent(owner.id, spec.name, spec.algorithm.upper(), spec.observation_space,
                                         spec.action_space, parameters, spec.sharing)
                created_keys[spec.name], _ = store.add_api_key(record.id, label="created by preset")
            else:
                record = self._reconcile(record, spec, parameters)
            self._start(record)
        return created_keys

    def _reconcile(self, record: AgentRecord, spec: AgentSpec, parameters: dict[str, Any]) -> AgentRecord:
        same_spaces = (space_to_json(parse_space(record.observation_space)) ==
                       space_to_json(parse_space(spec.observation_space)) and
                       space_to_json(parse_space(record.action_space)) == space_to_json(parse_space(spec.action_space)))
        if record.algorithm != spec.algorithm.upper() or not same_spaces:
            raise PresetError(
                f"agent {spec.name!r} exists in the store with algorithm {record.algorithm} and other spaces; "
                "its model cannot serve the preset's. Restart it from the admin commands, or use another --data")
        if record.parameters != parameters:
            logger.info("agent %s: parameters updated from the preset", spec.name)
            record = self.store.update_agent(record.id, parameters=parameters)
        return record

    def _start(self, record: AgentRecord) -> AgentRuntime:
        parameters = dict(record.parameters)
        if not algorithm_info(record.algorithm).on_policy:
            parameters["learning_starts"] = self.schedule.heatup_steps  # heatup is SB3's learning_starts
        try:
            learner = build_learner(record.algorithm, record.name, parse_space(record.observation_space),
                                    parse_space(record.action_space), parameters, self.schedule.improve_steps)
        except ParameterError as error:  # SB3 refused a combination the types allow
            raise PresetError(f"agent {record.name!r}: {error}") from None
        runtime = AgentRuntime(record, learner, self.schedule, self.store, self._evaluated)
        if runtime.resume():
            logger.info("agent %s resumes from %s", record.name, runtime.model_path)
        learner.start()
        self.runtimes[record.id] = runtime
        return runtime

    def _evaluated(self, runtime: AgentRuntime, result: EvaluationResult) -> None:
        for listener in self.evaluation_listeners:
            listener(runtime, result)

    def runtime(self, agent_name: str | None = None) -> AgentRuntime:
        """The runtime of a preset agent by name (the first agent when no name is given)."""
        name = agent_name or self.agents[0].name
        for runtime in self.runtimes.values():
            if runtime.record.name == name:
                return runtime
        raise KeyError(name)

    # -- sessions ------------------------------------------------------------------------------
    def login(self, apikey: str, evaluate_only: bool = False) -> Session:
        """Open a session for the agent an API key belongs to.

        Raises:
            Unauthorized: the key is unknown or revoked, or its agent is not served here.
        """
        record = self.store.agent_for_key(apikey) if isinstance(apikey, str) and apikey else None
        if record is None:
            raise Unauthorized("unknown or revoked API key")
        runtime = self.runtimes.get(record.id)
        if runtime is None:
            raise Unauthorized("this API key's agent is not served by this server")
        return self.sessions.open(runtime, evaluate_only)

    def session(self, key: Any) -> Session:
        """Raises Unauthorized for an unknown or expired session key."""
        return self.sessions.get(key)

    def logout(self, key: Any) -> None:
        self.sessions.end(self.sessions.get(key))

    def expire_sessions(self, idle_seconds: float) -> int:
        """End sessions idle for longer than ``idle_seconds``; returns how many ended."""
        return self.sessions.expire(idle_seconds)

    # -- lifecycle -----------------------------------------------------------------------------
    def checkpoint(self) -> None:
        for runtime in self.runtimes.values():
            runtime.checkpoint()

    def end_sessions(self) -> None:
        """End every session (their unfinished episodes are abandoned)."""
        self.sessions.end_all()

    def close(self) -> None:
        """Checkpoint every agent and stop the learners. Blocks: run it off the event loop, after
        `end_sessions`."""
        for runtime in self.runtimes.values():
            runtime.close()
        self.runtimes.clear()
