"""Presets as plain data: YAML preset files and the plain form of any preset, checked with every problem's key path.

A YAML preset holds the fields of a Python preset's `Preset`::

    owner: demo
    description: PPO on CartPole-v1          # what ``run.py -l`` shows
    agents:
      - name: cartpole
        algorithm: PPO
        observation_space: [[4], -inf, inf]
        action_space: 2
        parameters: {n_envs: 8, learning_rate: lin_0.001}
        sharing: pooled                       # optional
        lessons:                              # optional: each episode's config (docs/lessons.md)
          - name: short pole
            config: {length: 0.25}
            until: {evaluation_return: 300, evaluations: 2}
          - name: varied
            config: {length: {uniform: [0.4, 0.8]}, force_mag: {choice: [8.0, 10.0, 12.0]}}
    schedule: {improve_steps: 100000, steps_between_evaluation_periods: 5000, evaluation_episodes: 5}
    validation: {env_id: CartPole-v1, clients: 4, target_return: 475, max_steps: 100000}

`preset_from_data` turns such data (``yaml.safe_load``'s) into the same `Preset`, checking it as
`Preset.check` does, and reports every problem at once, each with its key path
(``agents[0].paramters: unknown key; expected one of ...``). Schedule and validation values are typed by
their dataclass fields and converted as the registry converts parameter values (`coerce`: ``"32"`` is
32); parameters go through the registry (`check_parameters`).

Overrides (``-cp KEY=VALUE``) change a preset's plain form before it is read again (`shepherd.loading.overrides`).
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from shepherd.agents import ParameterError
from shepherd.agents.bounds import DEFAULT_BOUNDS, ParameterBounds
from shepherd.agents.parameters import Parameter, ParamType, coerce
from shepherd.definition import AgentDefinition, Filters, Sharing
from shepherd.graph.preset import (AgentSpec, InvalidPreset, Preset, PresetError, PresetValidation, Problem,
                                   preset_problems)
from shepherd.graph.schedule import Schedule
from shepherd.environments import environment_problems, parse_environments
from shepherd.hierarchy import PROGRAMMED, LevelError, load_function, parse_level
from shepherd.lessons import LessonError, parse_lessons

#: the keys of a preset, of each of its agents, and the agents' keys without a default
PRESET_KEYS = ("owner", "description", "agents", "schedule", "validation", "environments")
AGENT_KEYS = ("name", "algorithm", "selector", "observation_space", "action_space", "parameters", "sharing", "filters",
              "lessons", "level")
AGENT_REQUIRED = ("name", "observation_space")
#: the file suffixes of YAML presets
YAML_SUFFIXES = (".yaml", ".yml")
#: how deeply a preset's values may nest (lists and mappings in one another): a real preset needs a handful
MAX_NESTING = 32
#: flow brackets nested deeper than this are refused before PyYAML reads them (it recurses once per level, and
#: takes seconds over thousands); values nested deeper than `MAX_NESTING` but not this are refused once read
SCAN_NESTING = 256
_QUOTED_OR_COMMENT = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"\\]|\\.)*\"|#[^\n]*")
_BRACKET = re.compile(r"[\[\]{}]")

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


def known_keys(keys: Any) -> str:
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
            problems.append(Problem(where, f"unknown key; expected one of {known_keys(known)}"))


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
    _selector_keys(values, where, problems)
    for key in ("name", "algorithm", "selector", "sharing"):
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
    try:
        lessons = parse_lessons(values.get("lessons"))
    except LessonError as error:
        problems.append(Problem(f"{where}.{error.path}", error.message))
        return None
    try:
        level = parse_level(values.get("level"))
    except LevelError as error:
        problems.append(Problem(f"{where}.{error.path}", error.message))
        return None
    algorithm, parameters = values.get("algorithm"), dict(values.get("parameters") or {})
    action_space = values.get("action_space")
    if "selector" in values:  # a programmed selector: its function, over its level's skills
        try:
            load_function(values["selector"])
        except ValueError as error:
            problems.append(Problem(f"{where}.selector", str(error)))
            return None
        skills = level.skills if level is not None else ()
        algorithm = PROGRAMMED
        parameters = {**parameters, "function": values["selector"], "skills": ",".join(skills)}
        action_space = len(skills) if action_space is None else action_space
    return AgentDefinition(values["name"], str(algorithm), values["observation_space"], action_space, parameters, sharing,
                           filters, lessons, level)


def _selector_keys(values: dict[str, Any], where: str, problems: list[Problem]) -> None:
    """An agent names its ``algorithm`` or, as a programmed selector, its ``selector`` (with a level), not both;
    a programmed selector's action space may be left out (one action per skill)."""
    if "selector" in values and "algorithm" in values:
        problems.append(Problem(f"{where}.selector", "a programmed selector takes the place of 'algorithm': give one"))
    elif "selector" in values:
        if "level" not in values:
            problems.append(Problem(f"{where}.level", "a programmed selector needs a level: the skills it chooses between"))
    else:
        for key in ("algorithm", "action_space"):
            if key not in values:
                problems.append(Problem(f"{where}.{key}", "missing; a value is required"))


def preset_from_data(data: Any, name: str = "", bounds: ParameterBounds = DEFAULT_BOUNDS) -> Preset:
    """The `Preset` a preset's plain form (a YAML preset's, or `preset_data`'s) describes, checked as
    `Preset.check` checks a Python preset's (parameters held to ``bounds``).

    Raises:
        InvalidPreset: every problem found (no source yet: the caller knows the file).
    """
    problems: list[Problem] = []
    values = _mapping(data, "", problems) if data is not None else None
    if values is None:
        raise InvalidPreset([Problem("", "a preset is a mapping with the keys " + known_keys(PRESET_KEYS)
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
    environments, environment_problems_found = parse_environments(values.get("environments"))
    problems.extend(Problem(path, message) for path, message in environment_problems_found)
    if specs:  # the agents' own checks (registry, schedule), with the agents that are well formed
        validation_agent = validation.agent if validation is not None else None
        if validation_agent in {item.get("name") for item in agents or () if isinstance(item, dict)} - {
                spec.name for _, spec in specs}:
            validation_agent = None  # an agent the preset has, refused above: not also "which the preset lacks"
        owner = values.get("owner")
        problems.extend(preset_problems(specs, schedule, validation_agent,
                                        owner if isinstance(owner, str) else None, bounds))  # a non-string: above
        problems.extend(Problem(path, message) for path, message in
                        environment_problems(environments, {spec.name: spec for _, spec in specs}))
    if problems or not validation_ok or schedule is None:
        raise InvalidPreset(problems)
    return Preset(tuple(spec for _, spec in specs), schedule, validation, owner=values.get("owner", "shepherd"),
                  description=values.get("description", ""), name=name, environments=tuple(environments))


def preset_data(graph: Preset) -> dict[str, Any]:
    """A preset's plain form, as a YAML preset writes it (every schedule and validation field included)."""
    return {
        "owner": graph.owner,
        "description": graph.description,
        "agents": [spec.to_json() for spec in graph.agents],
        "schedule": dataclasses.asdict(graph.schedule),
        "validation": None if graph.validation is None else dataclasses.asdict(graph.validation),
        **({"environments": [spec.to_json() for spec in graph.environments]} if graph.environments else {}),
    }


def nesting(value: Any) -> int:
    """How deeply lists and mappings nest in ``value`` (a scalar: 0; ``[[1]]``: 2), counted without
    recursion (and without going further than one level past `MAX_NESTING`)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, (list, tuple)) else None
        if children is None:
            continue
        deepest = max(deepest, depth + 1)
        if deepest > MAX_NESTING:
            break
        stack.extend((child, depth + 1) for child in children)
    return deepest


def check_nesting(value: Any) -> Any:
    """``value``, unless it nests deeper than `MAX_NESTING`.

    Raises:
        PresetError: saying how deep values may nest (the caller names the file or the -cp).
    """
    if nesting(value) > MAX_NESTING:
        raise _too_deep()
    return value


def _too_deep() -> PresetError:
    return PresetError(f"values nest deeper than {MAX_NESTING} levels of lists and mappings; a preset needs a handful")


def safe_load(text: str) -> Any:
    """``yaml.safe_load``, refusing values nested deeper than `MAX_NESTING` (PyYAML itself recurses per level:
    a few thousand brackets would exhaust Python's stack).

    Raises:
        yaml.YAMLError: not YAML. PresetError: nested too deeply.
    """
    if _flow_depth(text) > SCAN_NESTING:
        raise _too_deep()
    try:
        return check_nesting(yaml.safe_load(text))
    except RecursionError:
        raise _too_deep() from None


def _flow_depth(text: str) -> int:
    """How deeply ``text``'s flow brackets nest, quoted strings and comments left out (an apostrophe inside a
    plain scalar can throw the count off, which `SCAN_NESTING`, eight times any real preset's limit, absorbs)."""
    depth = deepest = 0
    for bracket in _BRACKET.findall(_QUOTED_OR_COMMENT.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def read_yaml_preset(path: Path) -> Any:
    """A YAML preset file's data, as ``yaml.safe_load`` reads it.

    Raises:
        PresetError: the file cannot be read, is not YAML (the message names the file and the line), or its
            values nest deeper than `MAX_NESTING`.
    """
    try:
        return safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise PresetError(f"{path}: cannot be read: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise PresetError(f"{path}: not UTF-8 text (byte {error.start} cannot be read)") from None
    except PresetError as error:
        raise PresetError(f"{path}: {error}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error)
        raise PresetError(f"{path}: not valid YAML{where}: {problem}") from None
