"""An agent's definition: one frozen record for presets, the admin service and the store alike."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any


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
class AgentDefinition:
    """What an agent is: algorithm, spaces in Shepherd's JSON syntax, parameter values, sharing mode.

    The sharing mode is checked here; the rest by `shepherd.agents.check_agent` (it needs the algorithm
    registry).
    """

    name: str
    algorithm: str
    observation_space: Any
    action_space: Any
    parameters: dict[str, Any] = field(default_factory=dict)
    sharing: Sharing = Sharing.POOLED

    def __post_init__(self) -> None:
        """Raises ValueError for an unknown sharing mode (a preset may name it as a string)."""
        object.__setattr__(self, "sharing", Sharing.parse(self.sharing))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "algorithm": self.algorithm, "observation_space": self.observation_space,
                "action_space": self.action_space, "parameters": dict(self.parameters),
                "sharing": self.sharing.value}
