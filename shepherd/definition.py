"""An agent's definition: one frozen record for presets, the admin service and the store alike."""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass, field, fields
from typing import Any

from shepherd.hierarchy import LevelSpec, parse_level
from shepherd.lessons import Lesson, lessons_to_json, parse_lessons


class Sharing(str, enum.Enum):
    """How the clients of one agent share what they learn."""

    POOLED = "pooled"  # one learner: every client's experience trains it, every client acts with it
    ADVISED = "advised"  # a learner per named client, shaped by the policy of a better client (docs/advice.md)

    @classmethod
    def parse(cls, value: Any) -> Sharing:
        """Raises ValueError naming the modes there are."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"knowledge sharing {value!r} is not available; use one of "
                             f"{', '.join(mode.value for mode in cls)}") from None


#: what a user (owner) or agent may be called: it names folders, API routes and download file names
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def name_problem(name: Any, what: str) -> str | None:
    """Why ``name`` cannot be a ``what`` name (``user``, ``agent``): None unless it breaks `NAME`, 1-64
    letters, digits, ``_``, ``.`` or ``-``, starting with a letter or digit."""
    if isinstance(name, str) and NAME.fullmatch(name):
        return None
    shown = name[:80] if isinstance(name, str) else name
    article = "an" if what[:1] in "aeio" else "a"  # "a user"
    return (f"{article} {what} name is 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit; "
            f"got {shown!r}")


#: the longest client name of an advised agent
CLIENT_NAME_MAX = 64
_CLIENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def check_client_name(name: Any) -> str:
    """A client name of an advised agent: it names a folder, so letters, digits, ``.``, ``_`` and ``-``,
    starting with a letter or digit, at most `CLIENT_NAME_MAX` characters.

    Raises:
        ValueError: saying what a name must be.
    """
    if not isinstance(name, str) or not name:
        raise ValueError("'client' must be a non-empty string naming the client, such as \"arm-3\"")
    if len(name) > CLIENT_NAME_MAX or not _CLIENT_NAME.fullmatch(name):
        raise ValueError(f"'client' must be at most {CLIENT_NAME_MAX} letters, digits, '.', '_' or '-', "
                         f"starting with a letter or digit; got {name[:80]!r}")
    return name


@dataclass(frozen=True)
class Filters:
    """What stands between a client's observations and rewards and the policy, with SB3's ``VecNormalize``
    and ``VecFrameStack`` semantics and defaults (``shepherd/agents/filters.py`` applies them).

    Observation normalisation keeps one running mean and variance per agent, pooled over every client;
    reward scaling divides each reward by the running deviation of a discounted return kept per client;
    both clip. Evaluation and deployment use the statistics without changing them. ``gamma`` None: the
    agent's own ``gamma`` parameter (0.99 without one), as RL Zoo passes it to ``VecNormalize``.
    """

    normalize_observations: bool = False
    normalize_rewards: bool = False
    clip_observations: float = 10.0
    clip_rewards: float = 10.0
    gamma: float | None = None
    epsilon: float = 1e-8
    frame_stack: int = 1

    @property
    def active(self) -> bool:
        """Some filter changes what the policy sees."""
        return self.normalize_observations or self.normalize_rewards or self.frame_stack > 1

    @classmethod
    def parse(cls, value: Any) -> Filters:
        """Filters from a preset's, the admin API's or the store's value: an object of the fields above
        (missing ones take their defaults), None for none, or Filters.

        Raises:
            ValueError: one line naming the field and what it takes.
        """
        if value is None:
            return cls()
        if isinstance(value, Filters):
            return value
        if not isinstance(value, dict):
            raise ValueError("filters must be an object such as {\"normalize_observations\": true}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"filters has no {', '.join(map(repr, unknown))}; its fields are {', '.join(sorted(known))}")
        for name in ("normalize_observations", "normalize_rewards"):
            if name in value and not isinstance(value[name], bool):
                raise ValueError(f"filters.{name} must be true or false, not {value[name]!r}")
        for name in ("clip_observations", "clip_rewards", "epsilon", "gamma"):
            number = value.get(name)
            if number is None and name == "gamma":
                continue
            if name in value and (isinstance(number, bool) or not isinstance(number, (int, float))
                                  or not math.isfinite(number) or number <= 0):
                raise ValueError(f"filters.{name} must be a positive number, not {number!r}")
        if "gamma" in value and value["gamma"] is not None and value["gamma"] > 1:
            raise ValueError(f"filters.gamma must be at most 1, not {value['gamma']!r}")
        stack = value.get("frame_stack", 1)
        if isinstance(stack, bool) or not isinstance(stack, int) or not 1 <= stack <= 64:
            raise ValueError(f"filters.frame_stack must be a whole number from 1 to 64, not {stack!r}")
        numbers = {name: float(value[name]) for name in ("clip_observations", "clip_rewards", "epsilon", "gamma")
                   if value.get(name) is not None}
        return cls(**{**value, **numbers})

    def to_json(self) -> dict[str, Any]:
        """The fields that differ from the defaults ({} for no filter)."""
        default = Filters()
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != getattr(default, f.name)}


@dataclass(frozen=True)
class AgentDefinition:
    """What an agent is: algorithm, spaces in Shepherd's JSON syntax, parameter values, sharing mode, filters,
    and its lessons (`shepherd.lessons`: each episode's config; none by default), and, for a selector, its
    level (`shepherd.hierarchy`: the skills it chooses between; None for a flat agent).

    The sharing mode is checked here; the rest by `shepherd.agents.check_agent` (it needs the algorithm
    registry).
    """

    name: str
    algorithm: str
    observation_space: Any
    action_space: Any
    parameters: dict[str, Any] = field(default_factory=dict)
    sharing: Sharing = Sharing.POOLED
    filters: Filters = field(default_factory=Filters)
    lessons: tuple[Lesson, ...] = ()
    level: LevelSpec | None = None

    def __post_init__(self) -> None:
        """Raises ValueError for an unknown sharing mode, bad filters, bad lessons (`LessonError`, with its
        key path from ``lessons``) or a bad level (`LevelError`, from ``level``); a preset may give them as plain
        data."""
        object.__setattr__(self, "sharing", Sharing.parse(self.sharing))
        object.__setattr__(self, "filters", Filters.parse(self.filters))
        lessons = self.lessons
        object.__setattr__(self, "lessons", parse_lessons(None if lessons == () or lessons is None else lessons))
        object.__setattr__(self, "level", parse_level(self.level))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "algorithm": self.algorithm, "observation_space": self.observation_space,
                "action_space": self.action_space, "parameters": dict(self.parameters),
                "sharing": self.sharing.value, "filters": self.filters.to_json(),
                **({"lessons": lessons_to_json(self.lessons)} if self.lessons else {}),
                **({"level": self.level.to_json()} if self.level is not None else {})}
