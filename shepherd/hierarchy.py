"""Levels (docs/levels.md): an agent made of agents. A *selector* agent declares a ``level`` over *skills* (other
agents of the preset); each env step is answered by the active skill, and the selector chooses the next skill
when an option ends (after ``option_steps`` env steps, at the env episode's end, or when the skill's own episode
would end).

This module is the schema only: `LevelSpec` as a plain frozen value parsed from a preset's, the admin API's or
the store's plain data (`parse_level`, errors with their key path: ``level.option_steps``), and back
(`LevelSpec.to_json`); and `load_function`, which imports a ``"module:function"`` (a programmed selector, a
skill's end condition). The served hierarchy is ``shepherd/graph/hierarchy/``'s, its level ``shepherd/level/hierarchy.py``.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable

#: the algorithm name of a programmed selector (``selector: "module:function"`` in a preset)
PROGRAMMED = "Programmed"
LEVEL_KEYS = ("skills", "option_steps", "skills_learn", "skill_ends")
_FUNCTION = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


class LevelError(ValueError):
    """A level that cannot be taken: ``path`` is where (``level.skills[1]``)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


@dataclass(frozen=True)
class LevelSpec:
    """A selector's level: the skills it chooses between (agents by name, in the order of its actions), the most
    env steps one choice lasts, whether the skills learn from the steps they answer (False: frozen skills, acting
    greedily, Bonsai's order), and for some skills a function of the observation saying when the skill's own
    episode would end (``"module:function"``)."""

    skills: tuple[str, ...]
    option_steps: int = 20
    skills_learn: bool = False
    skill_ends: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"skills": list(self.skills), "option_steps": self.option_steps, "skills_learn": self.skills_learn,
                **({"skill_ends": dict(self.skill_ends)} if self.skill_ends else {})}


def parse_level(value: Any, path: str = "level") -> LevelSpec | None:
    """A level from plain data (None for none; a `LevelSpec` as it is).

    Raises:
        LevelError: the first problem, with its key path under ``path``.
    """
    if value is None or isinstance(value, LevelSpec):
        return value
    if not isinstance(value, dict):
        raise LevelError(path, "must be a mapping such as {skills: [swingup, balance], option_steps: 20}")
    for key in value:
        if key not in LEVEL_KEYS:
            raise LevelError(f"{path}.{key}", f"unknown key; expected one of {', '.join(LEVEL_KEYS)}")
    skills = value.get("skills")
    if not isinstance(skills, (list, tuple)) or not skills:
        raise LevelError(f"{path}.skills", "must be a list of at least one agent name")
    for index, skill in enumerate(skills):
        if not isinstance(skill, str) or not skill:
            raise LevelError(f"{path}.skills[{index}]", f"must be an agent's name, not {skill!r}")
        if skill in skills[:index]:
            raise LevelError(f"{path}.skills[{index}]", f"skill {skill!r} is named twice")
    steps = value.get("option_steps", 20)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise LevelError(f"{path}.option_steps", f"must be a whole number of env steps, at least 1, not {steps!r}")
    learn = value.get("skills_learn", False)
    if not isinstance(learn, bool):
        raise LevelError(f"{path}.skills_learn", f"must be true or false, not {learn!r}")
    ends = value.get("skill_ends") or {}
    if not isinstance(ends, dict):
        raise LevelError(f"{path}.skill_ends", "must be a mapping of skill: \"module:function\"")
    for skill, function in ends.items():
        if skill not in skills:
            raise LevelError(f"{path}.skill_ends.{skill}", f"names no skill of this level ({', '.join(skills)})")
        try:
            load_function(function)
        except ValueError as error:
            raise LevelError(f"{path}.skill_ends.{skill}", str(error)) from None
    return LevelSpec(tuple(skills), steps, learn, dict(ends))


def load_function(text: Any) -> Callable[..., Any]:
    """The function a ``"module:function"`` names, imported.

    Raises:
        ValueError: not of that form, the module cannot be imported, or it has no such callable.
    """
    if not isinstance(text, str) or not _FUNCTION.fullmatch(text):
        raise ValueError(f"must be \"module:function\" (a function importable on the server), not {text!r}")
    module_name, name = text.split(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - whatever stops the import, the preset names it
        raise ValueError(f"module {module_name!r} cannot be imported ({type(error).__name__}: {error})") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise ValueError(f"module {module_name!r} has no function {name!r}")
    return function
