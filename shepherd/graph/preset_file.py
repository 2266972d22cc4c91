"""Presets as plain data: YAML preset files, the plain form of any preset, and ``-cp`` overrides.

A YAML preset holds the fields of a Python preset's ``GraphManager``::

    owner: demo
    description: PPO on CartPole-v1          # what ``run.py -l`` shows
    agents:
      - name: cartpole
        algorithm: PPO
        observation_space: [[4], -inf, inf]
        action_space: 2
        parameters: {n_envs: 8, learning_rate: lin_0.001}
        sharing: pooled                       # optional
    schedule: {improve_steps: 100000, steps_between_evaluation_periods: 5000, evaluation_episodes: 5}
    validation: {env_id: CartPole-v1, clients: 4, target_return: 475, max_steps: 100000}

`graph_from_data` turns such data (``yaml.safe_load``'s) into the same `GraphManager`, checking it as
`GraphManager.check` does, and reports every problem at once, each with its key path
(``agents[0].paramters: unknown key; expected one of ...``). Schedule and validation values are typed by
their dataclass fields and converted as the registry converts parameter values (`coerce`: ``"32"`` is
32); parameters go through the registry (`check_parameters`).

An override (``-cp KEY=VALUE``) changes one key of a preset's plain form (`preset_data`) before it is
built again; see `parse_override` for the grammar.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from shepherd.agents import ParameterError, algorithm_info, parameters
from shepherd.agents.parameters import Parameter, ParamType, coerce
from shepherd.definition import AgentDefinition, Filters, Sharing
from shepherd.graph.manager import (AgentSpec, GraphManager, InvalidPreset, PresetError, PresetValidation, Problem,
                                    preset_problems)
from shepherd.graph.schedule import Schedule

#: the keys of a preset, of each of its agents, and the agents' keys without a default
PRESET_KEYS = ("owner", "description", "agents", "schedule", "validation")
AGENT_KEYS = ("name", "algorithm", "observation_space", "action_space", "parameters", "sharing", "filters")
AGENT_REQUIRED = ("name", "algorithm", "observation_space", "action_space")
#: the file suffixes of YAML presets
YAML_SUFFIXES = (".yaml", ".yml")

_TYPES = {int: ParamType.INT, float: ParamType.FLOAT, str: ParamType.STR, bool: ParamType.BOOL,
          dict: ParamType.JSON}
_PLACEHOLDERS = {ParamType.INT: 1, ParamType.FLOAT: 1.0, ParamType.STR: "x"}


@dataclass(frozen=True)
class _Field:
    parameter: Parameter  # typed as an algorithm's parameter is, so `coerce` converts and checks it
    required: bool


def _fields(cls: type, block: str) -> dict[str, _Field]:
    """The fields of a dataclass (`Schedule`, `PresetValidation`) as typed parameters of ``block``."""
    hints = typing.get_type_hints(cls)
    found = {}
    for item in dataclasses.fields(cls):
        hint = hints[item.name]
        union = typing.get_origin(hint) in (typing.Union, types.UnionType)
        args = typing.get_args(hint) if union else (hint,)
        base = next(arg for arg in args if arg is not type(None))
        default = None if item.default is dataclasses.MISSING else item.default
        found[item.name] = _Field(Parameter(block, item.name, _TYPES[typing.get_origin(base) or base], default,
                                            nullable=type(None) in args),
                                  item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING)
    return found


SCHEDULE_FIELDS = _fields(Schedule, "schedule")
VALIDATION_FIELDS = _fields(PresetValidation, "validation")


def _known(keys: Any) -> str:
    return ", ".join(keys)


def _mapping(value: Any, path: str, problems: list[Problem]) -> dict[str, Any] | None:
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        return value
    problems.append(Problem(path, f"must be a mapping of name: value, not {_shown(value)}"))
    return None


def _shown(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return "a mapping" if isinstance(value, dict) else "a list"
    return repr(value)


def _unknown_keys(data: dict[str, Any], known: tuple[str, ...] | dict[str, Any], path: str,
                  problems: list[Problem]) -> None:
    for key in data:
        if key not in known:
            where = f"{path}.{key}" if path else str(key)
            problems.append(Problem(where, f"unknown key; expected one of {_known(known)}"))


def _block(data: Any, cls: type, fields: dict[str, _Field], block: str, problems: list[Problem]) -> Any:
    """A `Schedule` or `PresetValidation` from its mapping, or None with its problems added."""
    values = _mapping(data, block, problems)
    if values is None:
        return None
    before = len(problems)
    _unknown_keys(values, fields, block, problems)
    checked = {}
    for name, spec in fields.items():
        path = f"{block}.{name}"
        if name not in values:
            if spec.required:
                problems.append(Problem(path, "missing; a value is required"))
            continue
        try:
            value = coerce(spec.parameter, values[name])
        except ParameterError as error:
            problems.append(Problem(path, str(error).removeprefix(f"{block} parameter {name!r} ")))
            continue
        if spec.parameter.type is ParamType.JSON and not isinstance(value, dict):
            problems.append(Problem(path, f"must be a mapping of name: value, not {_shown(value)}"))
            continue
        try:  # the class's own range checks, one field at a time, so that each bad field is reported
            cls(**{**{other: _PLACEHOLDERS[field.parameter.type] for other, field in fields.items()
                      if field.required}, name: value})
        except ValueError as error:
            problems.append(Problem(path, str(error).removeprefix(f"{block}: ").removeprefix(f"{name} ")))
            continue
        checked[name] = value
    if len(problems) > before:
        return None
    return cls(**checked)


def _agent(data: Any, index: int, problems: list[Problem]) -> AgentSpec | None:
    where = f"agents[{index}]"
    values = _mapping(data, where, problems)
    if values is None:
        return None
    before = len(problems)
    _unknown_keys(values, AGENT_KEYS, where, problems)
    for key in AGENT_REQUIRED:
        if key not in values:
            problems.append(Problem(f"{where}.{key}", "missing; a value is required"))
    for key in ("name", "algorithm", "sharing"):
        if key in values and not (isinstance(values[key], str) and values[key]):
            problems.append(Problem(f"{where}.{key}", f"must be a non-empty string, not {_shown(values[key])}"))
    if "parameters" in values:
        _mapping(values["parameters"], f"{where}.parameters", problems)
    if len(problems) > before:
        return None
    try:
        sharing = Sharing.parse(values.get("sharing", Sharing.POOLED.value))
    except ValueError as error:
        problems.append(Problem(f"{where}.sharing", str(error)))
        return None
    try:
        filters = Filters.parse(values.get("filters"))
    except ValueError as error:
        problems.append(Problem(f"{where}.filters", str(error)))
        return None
    return AgentDefinition(values["name"], values["algorithm"], values["observation_space"], values["action_space"],
                           dict(values.get("parameters") or {}), sharing, filters)


def graph_from_data(data: Any, name: str = "") -> GraphManager:
    """The `GraphManager` a preset's plain form (a YAML preset's, or `preset_data`'s) describes, checked
    as `GraphManager.check` checks a Python preset's.

    Raises:
        InvalidPreset: every problem found (no source yet: the caller knows the file).
    """
    problems: list[Problem] = []
    values = _mapping(data, "", problems) if data is not None else None
    if values is None:
        raise InvalidPreset([Problem("", "a preset is a mapping with the keys " + _known(PRESET_KEYS)
                                     + f", not {_shown(data)}")])
    _unknown_keys(values, PRESET_KEYS, "", problems)
    for key in ("owner", "description"):
        if key in values and not isinstance(values[key], str):
            problems.append(Problem(key, f"must be a string, not {_shown(values[key])}"))
    specs: list[tuple[int, AgentSpec]] = []
    agents = values.get("agents")
    if not isinstance(agents, list) or not agents:
        problems.append(Problem("agents", "a preset needs a list of at least one agent"
                                + ("" if agents is None else f", not {_shown(agents)}")))
    else:
        for index, item in enumerate(agents):
            spec = _agent(item, index, problems)
            if spec is not None:
                specs.append((index, spec))
    schedule = Schedule()
    if values.get("schedule") is not None:
        schedule = _block(values["schedule"], Schedule, SCHEDULE_FIELDS, "schedule", problems)
    validation = None
    validation_ok = True
    if values.get("validation") is not None:
        validation = _block(values["validation"], PresetValidation, VALIDATION_FIELDS, "validation", problems)
        validation_ok = validation is not None
    if specs:  # the agents' own checks (registry, schedule), with the agents that are well formed
        validation_agent = validation.agent if validation is not None else None
        problems.extend(preset_problems(specs, schedule, validation_agent))
    if problems or not validation_ok or schedule is None:
        raise InvalidPreset(problems)
    graph = GraphManager([spec for _, spec in specs], schedule, validation, owner=values.get("owner", "shepherd"),
                         description=values.get("description", ""))
    graph.name = name
    return graph


def preset_data(graph: GraphManager) -> dict[str, Any]:
    """A preset's plain form, as a YAML preset writes it (every schedule and validation field included)."""
    return {
        "owner": graph.owner,
        "description": graph.description,
        "agents": [spec.to_json() for spec in graph.agents],
        "schedule": dataclasses.asdict(graph.schedule),
        "validation": None if graph.validation is None else dataclasses.asdict(graph.validation),
    }


def read_yaml_preset(path: Path) -> Any:
    """A YAML preset file's data, as ``yaml.safe_load`` reads it.

    Raises:
        PresetError: the file cannot be read or is not YAML (the message names the file and the line).
    """
    try:
        return yaml.safe_load(path.read_text())
    except OSError as error:
        raise PresetError(f"{path}: cannot be read: {error.strerror or error}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error)
        raise PresetError(f"{path}: not valid YAML{where}: {problem}") from None


# -- overrides ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Override:
    """One ``-cp KEY=VALUE``: the key's parts, the value as YAML reads it, and the text as given."""

    key: tuple[str, ...]
    value: Any
    text: str

    @property
    def source(self) -> str:
        return self.text if self.text.startswith("--") else f"-cp {self.text}"


def parse_override(text: str) -> Override:
    """``KEY=VALUE``: KEY a dotted path (see `apply_overrides`), VALUE a YAML scalar or flow collection
    (``0.0003``, ``true``, ``null``, ``lin_0.001``, ``[64, 64]``, ``{net_arch: [64]}``).

    Raises:
        PresetError: no ``=``, an empty key part, or a value YAML cannot read (one line, naming the -cp).
    """
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise PresetError(f"-cp {text}: write KEY=VALUE, such as agents.NAME.parameters.gamma=0.99")
    parts = tuple(part.strip() for part in key.split("."))
    if not all(parts):
        raise PresetError(f"-cp {text}: the key {key!r} has an empty part")
    try:
        parsed = yaml.safe_load(value) if value.strip() else None
    except yaml.YAMLError as error:
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise PresetError(f"-cp {text}: the value {value!r} is not a YAML value: {problem}") from None
    return Override(parts, parsed, text)


def seed_overrides(data: Any, seed: int | None) -> list[Override]:
    """``--seed N`` as overrides: the ``seed`` parameter of every agent of a preset's plain form (none
    without a seed)."""
    if seed is None:
        return []
    agents = data.get("agents") if isinstance(data, dict) else None
    if not isinstance(agents, list):
        return []
    names = [agent["name"] for agent in agents if isinstance(agent, dict) and isinstance(agent.get("name"), str)]
    return [Override(("agents", name, "parameters", "seed"), seed, f"--seed {seed}") for name in names]


Applied = list[tuple[str, Override]]  # each override applied, with the key path it set


def apply_overrides(data: dict[str, Any], overrides: list[Override]) -> tuple[dict[str, Any], Applied, list[Problem]]:
    """Set each override's key in a copy of a preset's plain form (`preset_data`), in order (a later one
    wins).

    The keys, at each level only the ones listed (an unknown one is a problem listing those it could be):

    - ``owner``, ``description``
    - ``agents.NAME`` (an agent by its name), ``agents.NAME.FIELD`` for a field of `AGENT_KEYS`,
      ``agents.NAME.parameters.PARAMETER`` for a parameter of the agent's algorithm (its registry's names),
      and deeper into a mapping value (``agents.NAME.parameters.policy_kwargs.net_arch``)
    - ``schedule.FIELD``, ``validation.FIELD`` for a field of `Schedule`, `PresetValidation`, and
      ``validation.env_kwargs.KEY``

    Returns the new data, each override applied with the key path it set (``agents[0].parameters.gamma``),
    and the problems of those that could not be applied.
    """
    data = copy.deepcopy(data)  # nothing of the preset changes
    applied: list[tuple[str, Override]] = []
    problems: list[Problem] = []
    for override in overrides:
        try:
            path = _set(data, override)
        except PresetError as error:
            problems.append(Problem("", str(error), override.source))
        else:
            applied.append((path, override))
    return data, applied, problems


def _set(data: dict[str, Any], override: Override) -> str:
    """Set one override; returns the key path it set. Raises PresetError naming what is wrong."""
    key = list(override.key)
    head = key.pop(0)
    if head not in PRESET_KEYS:
        raise PresetError(f"unknown key {head!r}; known: {_known(PRESET_KEYS)}")
    if head in ("owner", "description"):
        if key:
            raise PresetError(f"{head} is a value, not a mapping")
        data[head] = override.value
        return head
    if head == "agents":
        if not key:
            data["agents"] = override.value
            return "agents"
        if not isinstance(data.get("agents"), list):
            raise PresetError("the preset's agents are not a list, so none can be named")
        return _set_agent(data["agents"], key, override.value)
    fields = SCHEDULE_FIELDS if head == "schedule" else VALIDATION_FIELDS
    if not key:
        data[head] = override.value
        return head
    name = key.pop(0)
    if name not in fields:
        raise PresetError(f"unknown key {name!r} in {head}; known: {_known(fields)}")
    created = data.get(head) is None  # a preset without a validation block: the override makes one
    if created:
        data[head] = {}
    if not isinstance(data[head], dict):
        raise PresetError(f"the preset's {head} is not a mapping, so it has no key {name!r}")
    path = _set_in(data[head], name, key, override.value, f"{head}.{name}",
                   free=fields[name].parameter.type is ParamType.JSON)
    return head if created else path  # what the block then lacks is this override's doing


def _set_agent(agents: list[dict[str, Any]], key: list[str], value: Any) -> str:
    names = [agent["name"] if isinstance(agent, dict) and isinstance(agent.get("name"), str) else ""
             for agent in agents]
    dotted = ".".join(key)  # an agent's name may hold dots: the longest name that starts the key
    matches = [i for i, name in enumerate(names) if dotted == name or dotted.startswith(name + ".")]
    if not matches:
        raise PresetError(f"no agent named {key[0]!r} in agents; known: {_known(names)}")
    index = max(matches, key=lambda i: len(names[i]))
    rest = dotted[len(names[index]) + 1:].split(".") if dotted != names[index] else []
    where = f"agents[{index}]"
    if not rest:
        agents[index] = value
        return where
    field = rest.pop(0)
    if field not in AGENT_KEYS:
        raise PresetError(f"unknown key {field!r} in agents.{names[index]}; known: {_known(AGENT_KEYS)}")
    agent = agents[index]
    if field == "filters" and rest:
        known_filters = [f.name for f in dataclasses.fields(Filters)]
        if rest[0] not in known_filters or len(rest) > 1:
            raise PresetError(f"unknown key {'.'.join(rest)!r} in agents.{names[index]}.filters; known: "
                              f"{_known(known_filters)}")
        if agent.get("filters") is None:
            agent["filters"] = {}
        return _set_in(agent, "filters", rest, value, f"{where}.filters", free=True)
    if field != "parameters" or not rest:
        return _set_in(agent, field, rest, value, f"{where}.{field}", free=False)
    parameter = rest.pop(0)
    try:
        info = algorithm_info(str(agent.get("algorithm", "")))
    except ParameterError as error:
        raise PresetError(f"the parameters of agents.{names[index]} are not known: {error}") from None
    known = parameters(info.name)
    if agent.get("parameters") is None:
        agent["parameters"] = {}
    if not isinstance(agent["parameters"], dict):
        raise PresetError(f"agents.{names[index]}.parameters is not a mapping, so it has no key {parameter!r}")
    if parameter not in known and parameter not in dict(info.excluded):  # excluded: the registry says why
        raise PresetError(f"unknown key {parameter!r} in agents.{names[index]}.parameters: {info.name} has no "
                          f"such parameter; known: {_known(sorted(known))}")
    return _set_in(agent["parameters"], parameter, rest, value, f"{where}.parameters.{parameter}",
                   free=known[parameter].type is ParamType.JSON if parameter in known else False)


def _set_in(mapping: dict[str, Any], name: str, rest: list[str], value: Any, path: str, free: bool) -> str:
    """Set ``mapping[name]``, or a key deeper into it when ``rest`` (only into a free mapping's value)."""
    if not rest:
        mapping[name] = value
        return path
    if not free:
        raise PresetError(f"{path} is a value, not a mapping: set it whole")
    current = mapping.get(name)
    if current is None:
        current = mapping[name] = {}
    if not isinstance(current, dict):
        raise PresetError(f"{path} is not a mapping, so it has no key {rest[0]!r}")
    for part in rest[:-1]:
        current = current.setdefault(part, {})
        if not isinstance(current, dict):
            raise PresetError(f"{path}.{part} is not a mapping")
    current[rest[-1]] = value
    return path


def overridden(data: Any, name: str, overrides: list[Override], problems: list[Problem] | None = None) -> GraphManager:
    """The `GraphManager` of a preset's plain form (a YAML file's data, or `preset_data`'s) with overrides
    applied, checked as `graph_from_data` checks it.

    Raises:
        InvalidPreset: every problem: the ones given (of overrides that could not be parsed), overrides whose
            keys do not exist (listing the known ones at that level), and the preset's (each attributed to
            the ``-cp`` that set its key; the rest have no source yet: the file's).
    """
    problems = list(problems or [])
    applied: list[tuple[str, Override]] = []
    if isinstance(data, dict):  # otherwise graph_from_data says what the file should be
        data, applied, unknown = apply_overrides(data, overrides)
        problems.extend(unknown)
    try:
        graph = graph_from_data(data, name)
    except InvalidPreset as error:
        problems.extend(_attributed(problem, applied) for problem in error.problems)
    if problems:
        raise InvalidPreset(problems)
    return graph


def _attributed(problem: Problem, applied: list[tuple[str, Override]]) -> Problem:
    """The problem, with the sources of the overrides that set its key, a key around it, or a key inside it
    (an agent's problem of algorithm or spaces: its fields, not its parameters, which are checked one by
    one); unchanged when none did."""
    sources = []
    for path, override in applied:
        around = _inside(problem.path, path)
        within = _inside(path, problem.path) and ".parameters" not in path[len(problem.path):]
        if around or within:
            if override.source not in sources:
                sources.append(override.source)
    return dataclasses.replace(problem, source=", ".join(sources)) if sources and problem.path else problem


def _inside(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer + ".") or inner.startswith(outer + "[")
