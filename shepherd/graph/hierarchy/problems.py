"""The problems of a preset's levels (docs/levels.md), each with its key path: an unknown skill, a skill with other
spaces, a selector whose action space is not Discrete(len(skills)), cycles, and what is not served yet. A skill may
be an agent of the preset or of the data folder (its owner's): the latter are checked when the folder is seen."""

from __future__ import annotations

from typing import Any

from gymnasium import spaces

from shepherd.definition import AgentDefinition, Sharing
from shepherd.hierarchy import PROGRAMMED
from shepherd.wire.spaces import SpaceError, parse_space, space_to_json


def _space(value: Any) -> Any:
    """A space's JSON form, to compare (None: not a space; the registry's checks say why)."""
    try:
        return space_to_json(parse_space(value))
    except (SpaceError, ValueError, TypeError):
        return None


def level_problems(agents: list[tuple[int, AgentDefinition]],
                   stored: dict[str, AgentDefinition] | None = None) -> list[tuple[str, str]]:
    """Every problem of the preset's levels, as (key path, message).

    ``stored`` is the data folder's agents of the preset's owner, by name: a skill the preset does not declare is
    looked up there and checked as a preset's skill is. None: the data folder is not seen (a preset at load, ``run.py
    check`` without ``--data``); such a skill is then not refused here, but when the preset is served
    (`GraphManager.create_graph`), with the same words (`unknown_skill`).
    """
    declared = {spec.name: spec for _, spec in agents}
    known = {**(stored or {}), **declared}  # a preset's agent wins over the data folder's of the same name
    problems: list[tuple[str, str]] = []
    for index, spec in agents:
        where = f"agents[{index}]"
        if spec.level is None:
            if spec.algorithm.upper() == PROGRAMMED.upper():
                problems.append((f"{where}.level", "a programmed selector needs a level: the skills it chooses between"))
            continue
        problems.extend(_selector_problems(where, spec, declared, known, stored is not None))
    problems.extend(_cycles(agents, known))
    return problems


def unknown_skill(name: str) -> str:
    """The message of a skill found neither in the preset nor in the data folder."""
    return (f"unknown skill {name!r}: neither an agent of this preset nor an agent of the preset's owner in the "
            "data folder is named so")


def data_folder_skills(agents: list[tuple[int, AgentDefinition]]) -> list[tuple[str, str]]:
    """The skills the preset does not declare (to be found in the data folder when served), as (key path, name)."""
    declared = {spec.name for _, spec in agents}
    return [(f"agents[{index}].level.skills[{position}]", name) for index, spec in agents if spec.level is not None
            for position, name in enumerate(spec.level.skills) if name not in declared]


def _selector_problems(where: str, spec: AgentDefinition, declared: dict[str, AgentDefinition],
                       known: dict[str, AgentDefinition], folder_seen: bool) -> list[tuple[str, str]]:
    level = spec.level
    assert level is not None
    problems = []
    skills = level.skills
    action = _space(spec.action_space)
    if action is not None and action != space_to_json(spaces.Discrete(len(skills))):
        problems.append((f"{where}.action_space", f"a selector over {len(skills)} skills acts in Discrete({len(skills)}) "
                                                  f"(action_space: {len(skills)}), not {spec.action_space!r}"))
    if spec.sharing is not Sharing.POOLED:
        problems.append((f"{where}.sharing", "a selector is pooled (one learner); advised selectors are not served"))
    if spec.algorithm.upper() == PROGRAMMED.upper() and spec.parameters.get("skills") != ",".join(skills):
        problems.append((f"{where}.parameters.skills", f"a programmed selector's skills parameter is its level's "
                                                       f"skills, {','.join(skills)!r} (selector: sets it)"))
    first: tuple[str, Any] | None = None
    for position, name in enumerate(skills):
        path = f"{where}.level.skills[{position}]"
        if name not in known:
            if folder_seen:
                problems.append((path, unknown_skill(name)))
            continue  # not seen: checked when served
        skill = known[name]
        if name == spec.name:
            continue  # a cycle, reported as one
        shown = f"skill {name!r}" + ("" if name in declared else " (of the data folder)")
        observation, action = _space(skill.observation_space), _space(skill.action_space)
        if observation is not None and observation != _space(spec.observation_space):
            problems.append((path, f"{shown} observes {skill.observation_space!r}, the selector "
                                   f"{spec.observation_space!r}: a skill sees the selector's observations"))
        if first is None:
            first = (name, action)
        elif action is not None and first[1] is not None and action != first[1]:
            problems.append((path, f"{shown} acts in {skill.action_space!r}, skill {first[0]!r} in another "
                                   "space: every skill answers the same env"))
        if skill.level is not None and not _reaches(known, name, spec.name):
            problems.append((path, f"{shown} has skills of its own: one level of skills is served today"))
    return problems


def _reaches(known: dict[str, AgentDefinition], start: str, goal: str) -> bool:
    """Whether ``goal`` is among the skills reached from ``start``, level by level."""
    seen, stack = set(), [start]
    while stack:
        name = stack.pop()
        if name == goal:
            return True
        if name in seen or name not in known:
            continue
        seen.add(name)
        level = known[name].level
        stack.extend(level.skills if level is not None else ())
    return False


def _cycles(agents: list[tuple[int, AgentDefinition]], known: dict[str, AgentDefinition]) -> list[tuple[str, str]]:
    """Each cycle of selectors and skills (through the data folder's agents too) once, at the first of the preset's
    agents in it."""
    problems, reported = [], set()
    for index, spec in agents:
        if spec.level is None or spec.name in reported:
            continue
        path = _cycle_from(known, spec.name)
        if path:
            reported.update(path)
            problems.append((f"agents[{index}].level.skills", "a cycle of levels: " + " -> ".join(path + [path[0]])
                             + "; a skill cannot choose its own selector"))
    return problems


def _cycle_from(known: dict[str, AgentDefinition], start: str) -> list[str]:
    """A path of skills from ``start`` back to it ([]: none)."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        name, path = stack.pop()
        level = known[name].level if name in known else None
        for skill in level.skills if level is not None else ():
            if skill == start:
                return path
            if skill not in seen:
                seen.add(skill)
                stack.append((skill, path + [skill]))
    return []
