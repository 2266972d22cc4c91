"""A served agent, of any kind: the one interface the graph's lifecycle verbs call (`ServedAgent`), and how a
kind builds one (`AgentKind`).

A kind of agent is one package: a `ServedAgent` (its learners' runtimes, its status, the level of a login's
session, whose model an export gives) and an `AgentKind` (how it is built from its record, and what a folder
no server serves says of it), with one row in the table of kinds (`shepherd.graph.kinds`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from abc import ABC, abstractmethod
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, TypeVar

from shepherd.agents import ServedLearner, checkpoint
from shepherd.graph.runtime import AgentRuntime, AgentStats, saved_client_names
from shepherd.graph.schedule import EvaluationResult, Schedule
from shepherd.level import Level
from shepherd.level.shapes import flat_level
from shepherd.storage import AgentRecord, Store

logger = logging.getLogger(__name__)

#: how long a verb waits for a checkpoint it asked for (a slow one is logged; the last whole file stays)
CHECKPOINT_WAIT_SECONDS = 60.0
#: the client names an agent with named clients (an advised one) takes by default (``run.py --max-clients``)
MAX_CLIENTS = 64
NO_MODEL = "no saved model yet; it is written at the agent's first checkpoint, once it has learned"


class BadClient(ValueError):
    """A login's client name is missing, malformed, or given where it means nothing (HTTP 400)."""


@dataclass(frozen=True)
class AgentStatus:
    """An agent's live state. ``phase`` is the phase a new episode would start in, or ``restarting``,
    ``failed``, or ``stopped`` (not served here; ``steps`` then come from its last checkpoint). ``model``
    is None until a checkpoint exists, else ``{"bytes", "modified"}``."""

    served: bool
    phase: str
    steps: int
    steps_per_second: float
    sessions: int
    episodes: int
    mean_train_return: float | None
    last_evaluation: EvaluationResult | None
    failure: str | None
    last_active: float
    model: dict[str, float] | None
    #: an advised agent's clients (`AdvisedAgent.describe_clients`); None for a pooled agent
    clients: list[dict[str, Any]] | None = None
    #: a selector's level and the use of its options (`HierarchyAgent.describe_level`); None for a flat agent
    level: dict[str, Any] | None = None


class ServedAgent(ABC):
    """One served agent: the runtimes of its learners, and what the lifecycle verbs (`ServedAgents`) need of
    it. Runs on the graph's thread, except `discard` and `close`, which block (run them off the event loop).

    The verbs on every learner (checkpoint, drain, abort, discard, close, deleting models, forgetting the
    curve) run over `runtimes`; a kind whose learners need more overrides them.
    """

    record: AgentRecord
    #: the runtimes of its named clients, by name (empty: its logins name no client)
    clients: dict[str, AgentRuntime]
    #: client names whose learner could not be built, and why
    failures: dict[str, str]
    #: whether a training login names its client (``{"apikey": ..., "client": "arm-3"}``)
    takes_client_names: ClassVar[bool] = False

    @property
    @abstractmethod
    def runtimes(self) -> list[AgentRuntime]:
        """Every learner's runtime, in a stable order."""

    @property
    def runtime(self) -> AgentRuntime | None:
        """Its one runtime, when one learner serves every client: live parameter values go to it (None: a
        learner per client, whose values are stored for its next start)."""
        return None

    # -- serving ---------------------------------------------------------------------------------
    @abstractmethod
    def start(self, start: Callable[[AgentRuntime], None]) -> None:
        """Start its learners with ``start``, which also starts each learner it adds later."""

    @abstractmethod
    def session_runtime(self, client: str | None, evaluate_only: bool) -> AgentRuntime:
        """The runtime a login opens its session on (building a new client's blocks: `prepare` first).

        Raises:
            BadClient: the client name is missing, malformed, or means nothing to this agent.
        """

    def session_level(self, runtime: AgentRuntime, evaluate_only: bool, n_envs: int | None,
                      acting: str, client: str | None = None) -> Callable[[int], Level]:
        """The level of a session of this agent (of ``n_envs`` envs, None: one; ``acting`` "server" or "client";
        the login's ``client``) from its first actor id: the shape's (`shepherd.level.shapes`), on ``runtime``.
        Raises what refuses the login (HTTP 400)."""
        return flat_level(runtime, evaluate_only, n_envs, acting)

    def prepared_with(self) -> list[int]:
        """The store ids of the other served agents a login of this one opens sessions on too, whose learners a
        login's ``client`` may need built first (`prepare`): a selector's skills. None by default."""
        return []

    async def prepare(self, client: str | None, lock: asyncio.Lock, serving: Callable[[], bool]) -> None:
        """Build off the event loop what a login with ``client`` will need, under the agent's ``lock``
        (``serving``: whether this agent is still the one served, after a wait). Nothing by default."""

    @abstractmethod
    def export_runtime(self, client: str | None) -> AgentRuntime:
        """The runtime whose model an export gives (``client``'s, for an agent with named clients).

        Raises:
            NotFound: no such client, or none yet.
        """

    @abstractmethod
    def client_names(self) -> list[str]:
        """The client names it knows (served, or failed)."""

    # -- display ---------------------------------------------------------------------------------
    @abstractmethod
    def status(self, model: dict[str, float] | None) -> AgentStatus:
        """Its status (``model``: the agent folder's model file, `model_file`)."""

    @abstractmethod
    def stats(self) -> AgentStats | None:
        """Its progress figures (None: nothing to show yet)."""

    @abstractmethod
    def summary(self) -> str:
        """One line for the server's start: its algorithm and how far it is."""

    # -- every learner ---------------------------------------------------------------------------
    def checkpoint_all(self) -> None:
        for runtime in self.runtimes:
            runtime.checkpoint()

    def drain(self) -> None:
        """The server is stopping: every learner answers what it holds back, now and from now on."""
        for runtime in self.runtimes:
            runtime.learner.drain()

    def abort(self) -> None:
        """Stop its learners without writing anything (a start that failed half-way)."""
        for runtime in self.runtimes:
            runtime.learner.close()

    @abstractmethod
    def discard(self, timeout: float = 60.0) -> bool:
        """Stop its learners at once without a checkpoint, waiting up to ``timeout`` seconds; returns whether
        they all stopped. Blocks."""

    def close(self) -> None:
        """Checkpoint every learner and stop it. Blocks."""
        for runtime in self.runtimes:
            runtime.close()

    async def delete_models(self) -> bool:
        """Delete every learner's saved model (each keeps its weights and saves them again at its next
        checkpoint), after any checkpoint in flight; returns whether there was one."""
        deleted = False
        for runtime in self.runtimes:
            if runtime.checkpoints.pending is not None:
                await settle(runtime.checkpoints.pending, runtime.label)  # never delete under a write
            deleted = await asyncio.to_thread(unlink_model, runtime.model_path) or deleted
        return deleted

    def clear_curve_memory(self) -> None:
        """Forget the returns every learner keeps in memory for displays."""
        for runtime in self.runtimes:
            runtime.clear_curve_memory()


@dataclass(frozen=True)
class Building:
    """What a kind is given to build a served agent from its record (`GraphManager.build_agent`)."""

    record: AgentRecord
    schedule: Schedule
    store: Store
    #: the learner built first, in this process, which proved the agent's parameters
    proven: ServedLearner
    #: a served learner for a client name (None: the agent's one learner) from one built in this process
    #: (on Ray, one in an actor; the learner given is its local copy)
    serve: Callable[[ServedLearner, str | None], ServedLearner]
    #: another learner like ``proven``, in this process
    fresh: Callable[[], ServedLearner]
    on_evaluation: Callable[[AgentRuntime, EvaluationResult], None]
    #: the most client names an agent takes (None: any)
    max_clients: int | None
    #: a served agent of the same owner, by name (None: not served): a selector's skills
    find: Callable[[str], ServedAgent | None] = lambda name: None

    def learner(self, client: str | None) -> ServedLearner:
        """A fresh served learner (``client``'s)."""
        return self.serve(self.fresh(), client)


class AgentKind(ABC):
    """How one sharing mode builds its served agents, and what it reads of one no server serves."""

    #: whether its agents keep a learner, a curve and a model per named client (an advised agent's do)
    takes_client_names: ClassVar[bool] = False

    @abstractmethod
    def build(self, building: Building) -> ServedAgent:
        """A served agent resumed from its checkpoints, not started. Blocks.

        Raises:
            ParameterError, StoreError: it cannot be built, or its checkpoint cannot be loaded.
        """

    @abstractmethod
    def stored_status(self, store: Store, record: AgentRecord, phase: str, failure: str | None,
                      model: dict[str, float] | None) -> AgentStatus:
        """The status of an agent not served here (``phase``: stopped, restarting or failed) from its folder."""

    @abstractmethod
    def stored_checkpoints(self, store: Store, record: AgentRecord) -> list[Path]:
        """The checkpoints an agent not served here resumes from when next served (those that exist)."""

    @abstractmethod
    def stored_model(self, store: Store, record: AgentRecord, client: str | None) -> Path:
        """The model file an export of an agent not served here reads (it may not exist).

        Raises:
            NotFound: no client to export.
        """


A = TypeVar("A", bound=ServedAgent)


def of_kind(agent: ServedAgent | None, kind: type[A], name: object) -> A:
    """``agent`` as ``kind`` (a typed accessor for callers that know which kind they hold).

    Raises:
        KeyError: no agent; TypeError: an agent of another kind.
    """
    if agent is None:
        raise KeyError(name)
    if not isinstance(agent, kind):
        raise TypeError(f"agent {agent.record.name} is a {type(agent).__name__}, not a {kind.__name__}")
    return agent


async def settle(future: Future[Any], name: str) -> None:
    """Wait for a checkpoint; a failed or slow one is logged, and the last whole file stays. A slow one is left to
    finish (shielded: the learner's future cancelled by the timeout made its answer fail the learner)."""
    try:
        await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), CHECKPOINT_WAIT_SECONDS)
    except asyncio.CancelledError:
        raise
    except Exception as error:  # noqa: BLE001 - the file on disk is whole either way
        logger.warning("agent %s: checkpoint not written (%s: %s)", name, type(error).__name__, error)


def unlink_model(path: Path) -> bool:
    """Delete a saved model and the replay buffer beside it (an off-policy agent's, up to gigabytes: it stayed);
    returns whether there was a model."""
    try:
        os.unlink(checkpoint.replay_buffer_path(path))
    except FileNotFoundError:
        pass
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def model_file(path: Path) -> dict[str, float] | None:
    """A saved model's size and time, as `AgentStatus.model` has them (None: there is none)."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return {"bytes": stat.st_size, "modified": stat.st_mtime}


__all__ = ["AgentKind", "AgentStatus", "BadClient", "Building", "MAX_CLIENTS", "NO_MODEL", "ServedAgent",
           "model_file", "of_kind", "saved_client_names", "settle", "unlink_model"]
