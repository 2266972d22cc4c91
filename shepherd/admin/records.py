"""What the admin operations take and give: frozen records, each with its JSON form (the admin API's)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, TypeVar

from shepherd.definition import AgentDefinition

T = TypeVar("T")


class JsonRecord:
    """``to_json`` and ``from_json`` for a flat dataclass of JSON values; unknown keys are ignored."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_json(cls: type[T], data: dict[str, Any]) -> T:
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{key: value for key, value in data.items() if key in names})


@dataclass(frozen=True)
class Principal:
    """Who asks: the admin (admin token or the server's local credential) or the holder of one agent's
    API key, who may see and act on that agent only."""

    admin: bool
    agent_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"role": "admin" if self.admin else "agent", "agent": self.agent_id}


ADMIN = Principal(admin=True)


@dataclass(frozen=True)
class NewAgent:
    """An agent to create: its owner's name and its definition. Checked by the service, not here."""

    owner: str
    definition: AgentDefinition

    def to_json(self) -> dict[str, Any]:
        return {"owner": self.owner, **self.definition.to_json()}


@dataclass(frozen=True)
class UserView(JsonRecord):
    id: int
    name: str
    created: float
    agents: int


@dataclass(frozen=True)
class AgentView(JsonRecord):
    """An agent as the admin surfaces show it: its record and, when a server serves it, its live state.

    ``phase`` is the phase a new episode would start in, or ``restarting``, ``failed``, or ``stopped``
    (no server holds the data folder; ``steps`` then come from the last checkpoint). ``model`` is None
    until a checkpoint exists, else ``{"bytes", "modified"}``.
    """

    id: int
    owner: str
    name: str
    algorithm: str
    observation_space: Any
    action_space: Any
    parameters: dict[str, Any]
    sharing: str
    filters: dict[str, Any]
    created: float
    last_active: float
    served: bool
    phase: str
    steps: int
    steps_per_second: float
    sessions: int
    episodes: int
    mean_train_return: float | None
    last_evaluation: dict[str, Any] | None
    failure: str | None
    model: dict[str, Any] | None
    #: an advised agent's clients (name, steps, phase, sessions, episodes, recent_return, advisor,
    #: mean_train_return, failure); None for a pooled agent
    clients: list[dict[str, Any]] | None = None
    #: the agent's lessons (docs/lessons.md; None for none), and the lesson a served pooled agent is in now
    lessons: list[dict[str, Any]] | None = None
    lesson: str | None = None
    #: a selector's level (docs/levels.md: skills, option_steps, skills_learn) and, while served, its options'
    #: use by skill (chosen, steps, reward, mean_steps); None for a flat agent
    level: dict[str, Any] | None = None

    @property
    def ref(self) -> str:
        """How the command line names it: ``owner/name``."""
        return f"{self.owner}/{self.name}"


@dataclass(frozen=True)
class KeyView(JsonRecord):
    id: int
    agent_id: int
    agent: str  # owner/name
    label: str
    created: float
    revoked: bool


@dataclass(frozen=True)
class CreatedEnvironmentKey(JsonRecord):
    """A new key of an environment with roles (``owner/name``): ``key`` is shown this once; ``id`` is its id among
    the environments' keys (not the agents': the command line writes it ``eN``)."""

    key: str
    environment: str
    label: str
    id: int = 0


@dataclass(frozen=True)
class EnvironmentKeyView(JsonRecord):
    """A key of an environment with roles (``environment``: its owner/name), as `KeyView` is an agent's."""

    id: int
    environment_id: int
    environment: str
    label: str
    created: float
    revoked: bool


@dataclass(frozen=True)
class CreatedKey(JsonRecord):
    """A new API key: ``key`` is shown this once; the store keeps only its hash."""

    key: str
    id: int
    agent_id: int
    agent: str
    label: str


@dataclass(frozen=True)
class ActionResult(JsonRecord):
    """The outcome of a special action: whether it changed anything, and a sentence saying what."""

    done: bool
    message: str
