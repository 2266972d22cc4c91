"""Lessons (docs/lessons.md): how each episode of an agent sets up its environment, and when the agent moves on.

An agent's ``lessons`` are an ordered list; the agent starts in the first. Each lesson's ``config`` maps a name
(an attribute of the client's env, or whatever the client's own function reads) to a value drawn afresh for
every episode: a constant, ``{uniform: [low, high]}``, ``{choice: [...]}`` or ``{normal: [mean, std]}``. A
lesson's ``until: {evaluation_return: X, evaluations: K}`` moves the agent to the next lesson after K
evaluations in a row whose mean return is at least X; the last lesson has no ``until``.

This module is the schema only: plain frozen values, parsed from a preset's, the admin API's or the store's
plain data (`parse_lessons`, errors with their key path: ``lessons[1].config.length.uniform``), and back
(`lessons_to_json`). What the agent's runtime keeps (the current lesson, the streak, the generator) is
``shepherd/graph/lessons.py``'s.
"""

from __future__ import annotations

import json

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Union

#: the samplers a config value may name, each with the form of its argument
SAMPLERS = {"uniform": "[low, high]", "choice": "[value, ...]", "normal": "[mean, std]"}
LESSON_KEYS = ("name", "config", "until")
#: the most bytes a lesson's config may take as JSON: it travels to the client before every episode (issue 48)
MAX_CONFIG_BYTES = 16 * 1024
UNTIL_KEYS = ("evaluation_return", "evaluations")
#: how deep a config value may nest (lists in lists, a sampler's mapping counting as one): JSON replies carry a
#: bounded depth (orjson's is 254), and an agent whose config could not be shown would break every listing
MAX_DEPTH = 32


class LessonError(ValueError):
    """A lesson list that cannot be taken: ``path`` is where (``lessons[1].config.length.uniform``)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


#: the whole numbers the wire carries (orjson: a signed or an unsigned 64-bit integer)
WIRE_INTEGERS = range(-2 ** 63, 2 ** 64)


def _number(value: Any) -> bool:
    """A finite number the wire carries (an int within `WIRE_INTEGERS`, a finite float; never a bool)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value in WIRE_INTEGERS
    return isinstance(value, float) and math.isfinite(value)


@dataclass(frozen=True)
class Constant:
    value: Any

    def draw(self, rng: Any) -> Any:
        return _copy(self.value)

    def to_json(self) -> Any:
        return _copy(self.value)


@dataclass(frozen=True)
class Uniform:
    low: float
    high: float

    def __post_init__(self) -> None:
        if not (_number(self.low) and _number(self.high)):
            raise ValueError(f"low and high must be finite numbers, not {self.low!r} and {self.high!r}")
        if self.low > self.high:
            raise ValueError(f"low ({self.low:g}) must not be above high ({self.high:g})")
        if not math.isfinite(float(self.high) - float(self.low)):
            raise ValueError(f"high - low must be a finite number (numpy draws from no wider range), not "
                             f"{self.high:g} - {self.low:g}")

    def draw(self, rng: Any) -> float:
        return float(rng.uniform(self.low, self.high))

    def to_json(self) -> Any:
        return {"uniform": [self.low, self.high]}


@dataclass(frozen=True)
class Choice:
    values: tuple[Any, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(self.values))
        if not self.values:
            raise ValueError("needs at least one value to choose from")

    def draw(self, rng: Any) -> Any:
        return _copy(self.values[int(rng.integers(len(self.values)))])

    def to_json(self) -> Any:
        return {"choice": [_copy(value) for value in self.values]}


@dataclass(frozen=True)
class Normal:
    mean: float
    std: float

    def __post_init__(self) -> None:
        if not (_number(self.mean) and _number(self.std)):
            raise ValueError(f"mean and std must be finite numbers, not {self.mean!r} and {self.std!r}")
        if self.std < 0:
            raise ValueError(f"std must not be negative, not {self.std:g}")
        if not math.isfinite(abs(float(self.mean)) + 40.0 * float(self.std)):  # a draw 40 std away: never
            raise ValueError(f"mean and std must keep every draw finite, not {self.mean:g} and {self.std:g}")

    def draw(self, rng: Any) -> float:
        return float(rng.normal(self.mean, self.std))

    def to_json(self) -> Any:
        return {"normal": [self.mean, self.std]}


Sampler = Union[Constant, Uniform, Choice, Normal]


def _copy(value: Any) -> Any:
    if isinstance(value, list):
        return [_copy(item) for item in value]
    if isinstance(value, tuple):
        return [_copy(item) for item in value]
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    return value


def _json_value(value: Any) -> bool:
    """A constant the wire can carry: null, a bool, a finite number, a string, or a list of these."""
    if value is None or isinstance(value, (bool, str)):
        return True
    if isinstance(value, (int, float)):
        return _number(value)
    if isinstance(value, (list, tuple)):
        return all(_json_value(item) for item in value)
    return False


def _too_deep(value: Any, limit: int) -> bool:
    """Whether lists or mappings nest more than ``limit`` deep in ``value`` (looked at no deeper than that)."""
    level = [value]
    for _ in range(limit):
        level = [item for outer in level if isinstance(outer, (list, tuple, dict))
                 for item in (outer.values() if isinstance(outer, dict) else outer)]
        if not level:
            return False
    return any(isinstance(item, (list, tuple, dict)) for item in level)


def parse_sampler(value: Any, path: str) -> Sampler:
    """A config value: a sampler (as one, or as its one-key mapping) or a constant.

    Raises:
        LessonError: an unknown sampler, a bad range, an empty choice, a value JSON cannot carry, one nested
            deeper than `MAX_DEPTH`.
    """
    if isinstance(value, (Constant, Uniform, Choice, Normal)):
        return value
    if _too_deep(value, MAX_DEPTH):
        raise LessonError(path, f"nests deeper than {MAX_DEPTH} levels; a config value may nest {MAX_DEPTH} deep at most")
    if isinstance(value, dict):
        if len(value) != 1 or next(iter(value)) not in SAMPLERS:
            raise LessonError(path, "a mapping must be one sampler: " +
                              ", ".join(f"{{{name}: {form}}}" for name, form in SAMPLERS.items()) +
                              f"; got the keys {', '.join(map(str, value)) or '(none)'}")
        kind, argument = next(iter(value.items()))
        where = f"{path}.{kind}"
        if not isinstance(argument, (list, tuple)):
            raise LessonError(where, f"must be a list {SAMPLERS[kind]}, not {argument!r}")
        try:
            if kind == "choice":
                if not all(_json_value(item) for item in argument):
                    raise ValueError("its values must be numbers, strings, booleans, null or lists of them")
                return Choice(tuple(argument))
            if len(argument) != 2:
                raise ValueError(f"must be a list of two numbers {SAMPLERS[kind]}, not {len(argument)} values")
            return Uniform(*argument) if kind == "uniform" else Normal(*argument)
        except ValueError as error:
            raise LessonError(where, str(error)) from None
    if not _json_value(value):
        raise LessonError(path, f"must be a number, string, boolean, null, a list of them or a sampler, "
                                f"not {value!r}")
    return Constant(_copy(value) if isinstance(value, (list, tuple)) else value)


@dataclass(frozen=True)
class Until:
    """Advance after ``evaluations`` evaluations in a row whose mean return is at least ``evaluation_return``."""

    evaluation_return: float
    evaluations: int = 1

    def __post_init__(self) -> None:
        if not _number(self.evaluation_return):
            raise LessonError("evaluation_return", f"must be a finite number, not {self.evaluation_return!r}")
        if isinstance(self.evaluations, bool) or not isinstance(self.evaluations, int) or self.evaluations < 1:
            raise LessonError("evaluations", f"must be a whole number of at least 1, not {self.evaluations!r}")
        object.__setattr__(self, "evaluation_return", float(self.evaluation_return))

    def to_json(self) -> dict[str, Any]:
        return {"evaluation_return": self.evaluation_return, "evaluations": self.evaluations}


@dataclass(frozen=True)
class Lesson:
    """One lesson: its name, the config of its episodes (name: sampler), and when the agent moves on."""

    name: str
    config: Mapping[str, Sampler] = field(default_factory=dict)
    until: Until | None = None

    def __post_init__(self) -> None:
        """Raises LessonError (its path relative to the lesson) for a bad name, config or until."""
        if not isinstance(self.name, str) or not self.name.strip():
            raise LessonError("name", f"must be a non-empty string, not {self.name!r}")
        config = self.config if self.config is not None else {}
        if not isinstance(config, Mapping):
            raise LessonError("config", f"must be a mapping of name: value, not {config!r}")
        samplers = {}
        for key, value in config.items():
            if not isinstance(key, str) or not key:
                raise LessonError("config", f"names must be non-empty strings, not {key!r}")
            samplers[key] = parse_sampler(value, f"config.{key}")
        object.__setattr__(self, "config", samplers)
        size = len(json.dumps({key: sampler.to_json() for key, sampler in samplers.items()}))
        if size > MAX_CONFIG_BYTES:
            raise LessonError("config", f"is {size:,} bytes as JSON; a lesson's config may take at most "
                                        f"{MAX_CONFIG_BYTES:,} (it is sent to the client before every episode): keep "
                                        "large data at the client and let the config name it")
        #: a config of constants only is drawn as this one object (a reply sends it once for all its envs)
        constant = {key: sampler.draw(None) for key, sampler in samplers.items()} if all(
            isinstance(sampler, Constant) for sampler in samplers.values()) else None
        object.__setattr__(self, "_constant", constant)
        until = self.until
        if isinstance(until, dict):
            unknown = sorted(set(until) - set(UNTIL_KEYS))
            if unknown:
                raise LessonError(f"until.{unknown[0]}", f"unknown key; expected one of {', '.join(UNTIL_KEYS)}")
            if "evaluation_return" not in until:
                raise LessonError("until.evaluation_return", "missing; a value is required")
            try:
                until = Until(until["evaluation_return"], until.get("evaluations", 1))
            except LessonError as error:
                raise LessonError(f"until.{error.path}", error.message) from None
        elif until is not None and not isinstance(until, Until):
            raise LessonError("until", f"must be a mapping {{evaluation_return: X, evaluations: K}}, not {until!r}")
        object.__setattr__(self, "until", until)

    def draw(self, rng: Any) -> dict[str, Any]:
        """One episode's config: every value drawn from its sampler, in the config's order (a config of
        constants: one object for every episode, never to be changed)."""
        constant: dict[str, Any] | None = getattr(self, "_constant")
        if constant is not None:
            return constant
        return {key: sampler.draw(rng) for key, sampler in self.config.items()}

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "config": {key: s.to_json() for key, s in self.config.items()}}
        if self.until is not None:
            data["until"] = self.until.to_json()
        return data


def parse_lessons(value: Any) -> tuple[Lesson, ...]:
    """An agent's lessons from plain data (a list of mappings with ``name``, ``config``, ``until``) or `Lesson`
    values; None for none.

    Raises:
        LessonError: with the key path from ``lessons``: an empty list, a malformed lesson, a repeated name,
            a lesson after one without ``until``, an ``until`` on the last lesson.
    """
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise LessonError("lessons", f"must be a list of lessons, not {value!r}")
    if not value:
        raise LessonError("lessons", "an empty list; leave lessons out for none")
    lessons: list[Lesson] = []
    for index, item in enumerate(value):
        where = f"lessons[{index}]"
        if isinstance(item, Lesson):
            lesson = item
        elif isinstance(item, dict):
            unknown = [key for key in item if key not in LESSON_KEYS]
            if unknown:
                raise LessonError(f"{where}.{unknown[0]}", f"unknown key; expected one of {', '.join(LESSON_KEYS)}")
            if "name" not in item:
                raise LessonError(f"{where}.name", "missing; a value is required")
            try:
                lesson = Lesson(item["name"], item.get("config") or {}, item.get("until"))
            except LessonError as error:
                raise LessonError(f"{where}.{error.path}", error.message) from None
        else:
            raise LessonError(where, f"must be a mapping with name, config and until, not {item!r}")
        for earlier, other in enumerate(lessons):
            if other.name == lesson.name:
                raise LessonError(f"{where}.name", f"lessons[{earlier}] is also named {lesson.name!r}")
        if lessons and lessons[-1].until is None:
            raise LessonError(where, f"lessons[{index - 1}] ({lessons[-1].name!r}) has no 'until', so no lesson "
                                     "can follow it; give it an until or remove this one")
        lessons.append(lesson)
    if lessons[-1].until is not None:
        raise LessonError(f"lessons[{len(lessons) - 1}].until",
                          "the last lesson has no 'until': there is no lesson to advance to")
    return tuple(lessons)


def lessons_to_json(lessons: tuple[Lesson, ...]) -> list[dict[str, Any]]:
    return [lesson.to_json() for lesson in lessons]


@dataclass(frozen=True)
class EpisodeConfig:
    """One episode's setup: the lesson it was drawn from, and its config (name: value, plain JSON)."""

    lesson: str
    config: dict[str, Any]
