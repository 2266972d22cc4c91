"""A preset as a value: its agents, schedule, validation and description, frozen; what every loader
(`shepherd.loading`: Python, YAML, RL Zoo, with ``-cp`` and ``--seed``) returns and what the graph is built
from, with the problems the registry finds in it (`preset_problems`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from shepherd.agents import ParameterError, check_parameters
from shepherd.agents.registry import check_agent_spaces, check_extractor
from shepherd.agents.bounds import DEFAULT_BOUNDS, ParameterBounds
from shepherd.definition import AgentDefinition, name_problem
from shepherd.environments import EnvironmentSpec, environment_problems, parse_environments
from shepherd.hierarchy import PROGRAMMED, parse_level
from shepherd.graph.hierarchy.problems import data_folder_skills, level_problems
from shepherd.graph.schedule import Schedule
from shepherd.wire.spaces import SpaceError, parse_space


class PresetError(ValueError):
    """A preset (or a stored agent) is not valid; the message says what to fix."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a preset: where (a key path, ``agents[0].parameters.gamma``; empty for the
    whole preset), what, and where it came from (``source``: the preset's file, or the ``-cp`` that set it;
    empty while not known)."""

    path: str
    message: str
    source: str = ""

    def __str__(self) -> str:
        where = ": ".join(part for part in (self.source, self.path) if part)
        return f"{where}: {self.message}" if where else self.message


class InvalidPreset(PresetError):
    """A preset with one or more problems: the message is every one of them, one per line."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(map(str, self.problems)))

    def located(self, source: str) -> InvalidPreset:
        """The same problems, those without a source given ``source`` (the preset's file)."""
        return InvalidPreset([problem if problem.source else replace(problem, source=source)
                              for problem in self.problems])


#: an agent as a preset declares it (the one agent definition, by the name presets know)
AgentSpec = AgentDefinition


def programmed_selector(name: str, function: str, observation_space: Any, level: Any, **fields: Any) -> AgentSpec:
    """A programmed selector as a Python preset declares it (a YAML preset's ``selector: "module:function"`` in
    place of ``algorithm``): ``function`` (of the observation, returning a skill's name) chooses among ``level``'s
    skills (a mapping, or a `LevelSpec`); its action space is one action per skill.

    Raises:
        ValueError: a bad level (`LevelError`, with its key path).
    """
    spec = parse_level(level)
    assert spec is not None, "a programmed selector needs a level"
    parameters = {**fields.pop("parameters", {}), "function": function, "skills": ",".join(spec.skills)}
    return AgentSpec(name, PROGRAMMED, observation_space, fields.pop("action_space", len(spec.skills)), parameters,
                     level=spec, **fields)


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

    def __post_init__(self) -> None:
        """Raises ValueError for numbers out of range (the message starts with ``validation: NAME``)."""
        for name in ("max_steps", "clients", "timeout_seconds"):
            if getattr(self, name) <= 0:
                raise ValueError(f"validation: {name} must be positive")
        if not math.isfinite(self.target_return):
            raise ValueError("validation: target_return must be a finite number")


@dataclass(frozen=True)
class Preset:
    """A preset: its agents (in order), schedule, validation run, and the words that describe it.

    A Python preset file defines one as ``preset = Preset(...)`` (a ``graph_manager = GraphManager(...)``
    is still accepted: its `GraphManager.preset`); YAML and ``zoo:`` presets are read into one.
    """

    agents: tuple[AgentSpec, ...]
    schedule: Schedule = field(default_factory=Schedule)
    validation: PresetValidation | None = None
    owner: str = "shepherd"
    description: str = ""
    name: str = ""  # the file's stem, or the ``zoo:`` text; set by the loader
    #: environments with roles played by its agents (`shepherd.environments`, docs/how-to/multi-agent.md)
    environments: tuple[EnvironmentSpec, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "agents", tuple(self.agents))
        object.__setattr__(self, "environments", tuple(self.environments))

    def problems(self, bounds: ParameterBounds = DEFAULT_BOUNDS) -> list[Problem]:
        """Every problem of the preset, each with its key path (``agents[0]...``, ``environments[0]...``):
        `preset_problems` (parameters held to ``bounds``, the serving server's) and `environment_problems`."""
        problems = preset_problems(list(enumerate(self.agents)), self.schedule,
                                   None if self.validation is None else self.validation.agent, self.owner, bounds)
        specs, parsed = parse_environments(list(self.environments))
        problems.extend(Problem(path, message) for path, message in parsed)
        problems.extend(Problem(path, message) for path, message in
                        environment_problems(specs, {spec.name: spec for spec in self.agents}))
        return problems

    def check_environments(self, stored: dict[str, AgentDefinition]) -> None:
        """Check the environments again with the data folder's agents of the preset's owner (``stored``, by name)
        seen: every role names an agent, and self-play's agents have the same spaces.

        Raises:
            InvalidPreset: every problem, each with its key path.
        """
        problems = [Problem(path, message) for path, message in environment_problems(
            list(self.environments), {spec.name: spec for spec in self.agents}, stored)]
        if problems:
            raise InvalidPreset(problems)

    def check(self, bounds: ParameterBounds = DEFAULT_BOUNDS) -> None:
        """Raises InvalidPreset with every problem found (`problems`)."""
        problems = self.problems(bounds)
        if problems:
            raise InvalidPreset(problems)

    def folder_skills(self) -> set[str]:
        """The skills of the preset's selectors that it does not declare: agents of its owner in the data folder."""
        return {name for _, name in data_folder_skills(list(enumerate(self.agents)))}

    def check_skills(self, stored: dict[str, AgentDefinition]) -> None:
        """Check the levels again with the data folder's agents of the preset's owner (``stored``, by name) seen:
        a skill the preset does not declare must be one of them, with the selector's spaces, and close no cycle.

        Raises:
            InvalidPreset: every problem of the levels, each with its key path.
        """
        problems = [Problem(path, message) for path, message in level_problems(list(enumerate(self.agents)), stored)]
        if problems:
            raise InvalidPreset(problems)


def preset_problems(agents: list[tuple[int, AgentSpec]], schedule: Schedule | None,
                    validation_agent: str | None = None, owner: Any = None,
                    bounds: ParameterBounds = DEFAULT_BOUNDS) -> list[Problem]:
    """The problems of a preset's agents, each located as ``agents[INDEX]``: an unknown algorithm or
    sharing mode, spaces the algorithm cannot handle, every bad parameter (through the registry's
    `check_agent_spaces`, `check_parameters` and `check_extractor`, and outside ``bounds``), a heatup that contradicts the algorithm (unless ``schedule`` is
    None: not known), names that break the rule the admin API holds names to (`name_problem`) or repeat,
    an ``owner`` (unless None: not given) that breaks it, and a validation ``agent`` the preset lacks.

    ``agents`` pairs each agent with its index in the preset (a YAML preset leaves out the malformed ones).
    """
    problems = []
    if not agents:
        problems.append(Problem("agents", "a preset needs at least one agent"))
    if owner is not None and (bad := name_problem(owner, "user")) is not None:
        problems.append(Problem("owner", bad))
    seen: dict[str, int] = {}
    for index, spec in agents:
        where = f"agents[{index}]"
        if (bad := name_problem(spec.name, "agent")) is not None:
            problems.append(Problem(f"{where}.name", bad))
        if spec.name in seen:
            problems.append(Problem(f"{where}.name", f"agent names in a preset must be unique; "
                                                    f"agents[{seen[spec.name]}] is also named {spec.name!r}"))
        seen.setdefault(spec.name, index)
        try:
            info = check_agent_spaces(spec)
        except (ParameterError, SpaceError) as error:
            problems.append(Problem(where, str(error)))
            continue
        if not isinstance(spec.parameters, dict):
            problems.append(Problem(f"{where}.parameters", "must be a mapping of name: value"))
            continue
        valid = True
        for name, value in spec.parameters.items():
            try:
                bounds.check(info.name, check_parameters(info.name, {name: value}))
            except ParameterError as error:
                problems.append(Problem(f"{where}.parameters.{name}", str(error)))
                valid = False
        if valid:  # the network the parameters make, on the observations
            try:
                check_extractor(parse_space(spec.observation_space), check_parameters(info.name, spec.parameters))
            except ParameterError as error:
                path = "parameters.policy_kwargs" if "policy_kwargs" in spec.parameters else "observation_space"
                problems.append(Problem(f"{where}.{path}", str(error)))
        if schedule is None:
            continue
        starts = spec.parameters.get("learning_starts")
        if not info.on_policy and starts is not None:
            try:
                different = int(starts) != schedule.heatup_steps
            except (TypeError, ValueError):
                different = False  # reported above as a bad value
            if different:
                problems.append(Problem(f"{where}.parameters.learning_starts",
                                        f"learning_starts is the schedule's heatup_steps ({schedule.heatup_steps}); "
                                        "set heatup_steps instead"))
        if info.on_policy and schedule.heatup_steps:
            problems.append(Problem("schedule.heatup_steps",
                                    f"heatup_steps is for off-policy algorithms (their replay buffer); "
                                    f"{info.name} (agent {spec.name!r}) learns only from its own policy's "
                                    "actions, so set it to 0"))
    problems.extend(Problem(path, message) for path, message in level_problems(agents))
    if validation_agent is not None and validation_agent not in seen:
        problems.append(Problem("validation.agent", f"names agent {validation_agent!r}, which the preset lacks"))
    return problems
