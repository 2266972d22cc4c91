"""The store's records as frozen values (users, agents, API keys) and the digests and secrets keys are made of."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from typing import Any

from shepherd.definition import AgentDefinition, Filters, Sharing
from shepherd.hierarchy import parse_level
from shepherd.lessons import parse_lessons


@dataclass(frozen=True)
class User:
    id: int
    name: str
    created: float


@dataclass(frozen=True)
class AgentRecord:
    """An agent as stored: its owner, algorithm, spaces (JSON specs) and parameter values."""

    id: int
    owner_id: int
    name: str
    algorithm: str
    observation_space: Any
    action_space: Any
    parameters: dict[str, Any] = field(default_factory=dict)
    sharing: str = Sharing.POOLED.value
    filters: dict[str, Any] = field(default_factory=dict)  # `Filters.to_json()`: {} for none
    created: float = 0.0
    last_active: float = 0.0
    #: `shepherd.lessons.lessons_to_json()`: [] for none (and in stores written before lessons)
    lessons: list[dict[str, Any]] = field(default_factory=list)
    #: a selector's `shepherd.hierarchy.LevelSpec.to_json()`: None for a flat agent (and in older stores)
    level: dict[str, Any] | None = None

    @property
    def definition(self) -> AgentDefinition:
        """What the agent is, without where it is stored and who owns it."""
        return AgentDefinition(self.name, self.algorithm, self.observation_space, self.action_space,
                               dict(self.parameters), Sharing.parse(self.sharing), Filters.parse(self.filters),
                               tuple(parse_lessons(self.lessons or None)), parse_level(self.level))


@dataclass(frozen=True)
class EnvironmentRecord:
    """An environment with roles as stored (`shepherd.environments.EnvironmentSpec.to_json` in ``definition``):
    its key logs a client in to all its roles at once."""

    id: int
    owner_id: int
    name: str
    definition: dict[str, Any]
    created: float = 0.0


@dataclass(frozen=True)
class ApiKey:
    id: int
    agent_id: int
    label: str
    created: float
    revoked: bool = False


@dataclass(frozen=True)
class EnvironmentKey:
    """A key of an environment with roles, as stored (apart from agents' keys: its ids are its own)."""

    id: int
    environment_id: int
    label: str
    created: float
    revoked: bool = False


def hash_key(key: str) -> str:
    """The stored form of an API key; keys carry 256 random bits, so a plain SHA-256 suffices."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()  # (a header's bytes that are no UTF-8)


def new_secret() -> str:
    """A new API key or session key: 256 random bits, URL-safe."""
    return secrets.token_urlsafe(32)
