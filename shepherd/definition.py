"""An agent's definition: one frozen record for presets, the admin service and the store alike."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Sharing(str, enum.Enum):
    """How the clients of one agent share what they learn."""

    POOLED = "pooled"  # one learner: every client's experience trains it, every client acts with it

    @classmethod
    def parse(cls, value: Any) -> Sharing:
        """Raises ValueError naming the modes there are."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"knowledge sharing {value!r} is not available; use one of "
                             f"{', '.join(mode.value for mode in cls)}") from None


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
