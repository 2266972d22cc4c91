"""``-cp KEY=VALUE`` overrides and ``--seed N``: keys of a preset's plain form (`yaml_preset.preset_data`) set
before it is read again into a `Preset`; see `parse_override` for the grammar."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

import yaml

from shepherd.agents import ParameterError, algorithm_info, parameters
from shepherd.agents.bounds import DEFAULT_BOUNDS, ParameterBounds
from shepherd.agents.parameters import ParamType
from shepherd.definition import Filters
from shepherd.hierarchy import LEVEL_KEYS
from shepherd.graph.preset import InvalidPreset, Preset, PresetError, Problem
from shepherd.environments import ENVIRONMENT_KEYS, SELF_PLAY_KEYS
from shepherd.loading.yaml_preset import (AGENT_KEYS, PRESET_KEYS, SCHEDULE_FIELDS, VALIDATION_FIELDS, known_keys,
                                          preset_from_data, safe_load)


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
        PresetError: no ``=``, an empty key part, or a value YAML cannot read or that nests too deeply (one
            line, naming the -cp).
    """
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise PresetError(f"-cp {text}: write KEY=VALUE, such as agents.NAME.parameters.gamma=0.99")
    parts = tuple(part.strip() for part in key.split("."))
    if not all(parts):
        raise PresetError(f"-cp {text}: the key {key!r} has an empty part")
    try:
        parsed = safe_load(value) if value.strip() else None
    except yaml.YAMLError as error:
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise PresetError(f"-cp {text}: the value {value!r} is not a YAML value: {problem}") from None
    except PresetError as error:
        raise PresetError(f"-cp {text}: {error}") from None
    return Override(parts, parsed, text)


def seed_overrides(data: Any, seed: int | None) -> list[Override]:
    """``--seed N`` as overrides: the ``seed`` parameter of every agent of a preset's plain form (none
    without a seed)."""
    if seed is None:
        return []
    agents = data.get("agents") if isinstance(data, dict) else None
    if not isinstance(agents, list):
        return []
    names = [agent["name"] for agent in agents if isinstance(agent, dict) and isinstance(agent.get("name"), str)
             and "selector" not in agent]  # a programmed selector has no algorithm, so no parameters
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
    - ``agents.NAME.level.KEY`` for a key of a selector's level (``skills``, ``option_steps``, ...,
      ``skill_ends.SKILL``)
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
        raise PresetError(f"unknown key {head!r}; known: {known_keys(PRESET_KEYS)}")
    if head in ("owner", "description"):
        if key:
            raise PresetError(f"{head} is a value, not a mapping")
        data[head] = override.value
        return head
    if head in NAMED:  # a list of named items: the whole list, or an item by its name
        if not key:
            data[head] = override.value
            return head
        if not isinstance(data.get(head), list):
            raise PresetError(f"the preset's {head} are not a list, so none can be named")
        return NAMED[head](data[head], key, override.value)
    fields = SCHEDULE_FIELDS if head == "schedule" else VALIDATION_FIELDS
    if not key:
        data[head] = override.value
        return head
    name = key.pop(0)
    if name not in fields:
        raise PresetError(f"unknown key {name!r} in {head}; known: {known_keys(fields)}")
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
        raise PresetError(f"no agent named {key[0]!r} in agents; known: {known_keys(names)}")
    index = max(matches, key=lambda i: len(names[i]))
    rest = dotted[len(names[index]) + 1:].split(".") if dotted != names[index] else []
    where = f"agents[{index}]"
    if not rest:
        agents[index] = value
        return where
    field = rest.pop(0)
    if field not in AGENT_KEYS:
        raise PresetError(f"unknown key {field!r} in agents.{names[index]}; known: {known_keys(AGENT_KEYS)}")
    agent = agents[index]
    if field == "filters" and rest:
        known_filters = [f.name for f in dataclasses.fields(Filters)]
        if rest[0] not in known_filters or len(rest) > 1:
            raise PresetError(f"unknown key {'.'.join(rest)!r} in agents.{names[index]}.filters; known: "
                              f"{known_keys(known_filters)}")
        if agent.get("filters") is None:
            agent["filters"] = {}
        return _set_in(agent, "filters", rest, value, f"{where}.filters", free=True)
    if field == "level" and rest:  # a selector's level (docs/levels.md), key by key
        if rest[0] not in LEVEL_KEYS or (len(rest) > 1 and rest[0] != "skill_ends"):
            raise PresetError(f"unknown key {'.'.join(rest)!r} in agents.{names[index]}.level; known: "
                              f"{known_keys(LEVEL_KEYS)}")
        if agent.get("level") is None:
            agent["level"] = {}
        return _set_in(agent, "level", rest, value, f"{where}.level", free=True)
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
                          f"such parameter; known: {known_keys(sorted(known))}")
    return _set_in(agent["parameters"], parameter, rest, value, f"{where}.parameters.{parameter}",
                   free=known[parameter].type is ParamType.JSON if parameter in known else False)


def _set_environment(environments: list[Any], key: list[str], value: Any) -> str:
    """``environments.NAME[.FIELD[.KEY]]``: an environment of the preset by name, a field of it, or a key of its
    roles, teams or self_play."""
    names = [env.get("name") if isinstance(env, dict) and isinstance(env.get("name"), str) else ""
             for env in environments]
    if key[0] not in names:
        raise PresetError(f"no environment named {key[0]!r} in environments; known: {known_keys(names)}")
    index = names.index(key[0])
    where, rest = f"environments[{index}]", key[1:]
    if not rest:
        environments[index] = value
        return where
    field = rest.pop(0)
    if field not in ENVIRONMENT_KEYS:
        raise PresetError(f"unknown key {field!r} in environments.{key[0]}; known: {known_keys(ENVIRONMENT_KEYS)}")
    if field == "self_play" and rest and (rest[0] not in SELF_PLAY_KEYS or len(rest) > 1):
        raise PresetError(f"unknown key {'.'.join(rest)!r} in environments.{key[0]}.self_play; known: "
                          f"{known_keys(SELF_PLAY_KEYS)}")
    return _set_in(environments[index], field, rest, value, f"{where}.{field}",
                   free=field in ("roles", "teams", "self_play"))


#: the preset's lists of named items, and how an override sets a key of one by its name
NAMED = {"agents": _set_agent, "environments": _set_environment}


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


def overridden(data: Any, name: str, overrides: list[Override], problems: list[Problem] | None = None,
               bounds: ParameterBounds = DEFAULT_BOUNDS) -> Preset:
    """The `Preset` of a preset's plain form (a YAML file's data, or `preset_data`'s) with overrides
    applied, checked as `preset_from_data` checks it.

    Raises:
        InvalidPreset: every problem: the ones given (of overrides that could not be parsed), overrides whose
            keys do not exist (listing the known ones at that level), and the preset's (each attributed to
            the ``-cp`` that set its key; the rest have no source yet: the file's).
    """
    problems = list(problems or [])
    applied: list[tuple[str, Override]] = []
    if isinstance(data, dict):  # otherwise preset_from_data says what the file should be
        data, applied, unknown = apply_overrides(data, overrides)
        problems.extend(unknown)
    try:
        preset = preset_from_data(data, name, bounds)
    except InvalidPreset as error:
        problems.extend(_attributed(problem, applied) for problem in error.problems)
    if problems:
        raise InvalidPreset(problems)
    return preset


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
