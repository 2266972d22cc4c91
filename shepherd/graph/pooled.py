"""The ``pooled`` sharing mode: one learner for every client of the agent (`PooledAgent`, one `AgentRuntime`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

from shepherd.agents import checkpoint
from shepherd.graph.agent import AgentKind, AgentStatus, BadClient, Building, ServedAgent
from shepherd.graph.runtime import AgentRuntime, AgentStats, saved_client_names
from shepherd.storage import AgentRecord, Store

logger = logging.getLogger(__name__)


class PooledAgent(ServedAgent):
    """A pooled agent: one runtime, whose learner every session of the agent feeds."""

    def __init__(self, runtime: AgentRuntime) -> None:
        self._runtime = runtime
        self.clients: dict[str, AgentRuntime] = {}  # its logins name no client
        self.failures: dict[str, str] = {}

    @property
    def record(self) -> AgentRecord:  # type: ignore[override]  # the runtime's, which set-param replaces
        return self._runtime.record

    @property
    def runtimes(self) -> list[AgentRuntime]:
        return [self._runtime]

    @property
    def runtime(self) -> AgentRuntime:
        return self._runtime

    def start(self, start: Callable[[AgentRuntime], None]) -> None:
        start(self._runtime)

    def session_runtime(self, client: str | None, evaluate_only: bool) -> AgentRuntime:
        if client is not None:
            raise BadClient(f"'client' names a client of an advised agent; agent {self.record.name} is pooled (one "
                            "learner for every client): leave 'client' out")
        return self._runtime

    def export_runtime(self, client: str | None) -> AgentRuntime:
        return self._runtime

    def client_names(self) -> list[str]:
        return saved_client_names(self._runtime.store.agent_folder(self.record.id))

    def status(self, model: dict[str, float] | None) -> AgentStatus:
        runtime = self._runtime
        stats = runtime.stats()
        return AgentStatus(True, stats.phase, stats.steps, stats.steps_per_second, stats.sessions, stats.episodes,
                           stats.mean_train_return, stats.last_evaluation, stats.failure, runtime.last_active, model)

    def stats(self) -> AgentStats:
        return self._runtime.stats()

    def summary(self) -> str:
        runtime = self._runtime
        return (f"{runtime.record.algorithm}, {runtime.tracker.steps} steps so far, observations "
                f"{runtime.observation_space}, actions {runtime.action_space}")

    def discard(self, timeout: float = 60.0) -> bool:
        return self._runtime.discard(timeout)


class Pooled(AgentKind):
    """Builds a pooled agent: the learner that proved the parameters, served (`GraphManager.remote_learners`)."""

    def build(self, building: Building) -> PooledAgent:
        record = building.record
        runtime = AgentRuntime(record, building.serve(building.proven, None), building.schedule, building.store,
                               building.on_evaluation)
        try:
            resumed = runtime.resume()
        except BaseException:  # (a damaged checkpoint) a Ray actor served for it must not outlive it: it kept its
            runtime.discard(10.0)  # name, so that the admin restart the failure asks for never built the agent
            raise
        if resumed:
            logger.info("agent %s resumes from %s", record.name, runtime.model_path)
        return PooledAgent(runtime)

    def stored_status(self, store: Store, record: AgentRecord, phase: str, failure: str | None,
                      model: dict[str, float] | None) -> AgentStatus:
        path = self.stored_model(store, record, None)
        steps = checkpoint.saved_steps(path) if model and phase == "stopped" else 0
        return AgentStatus(False, phase, steps, 0.0, 0, 0, None, None, failure, record.last_active, model)

    def stored_model(self, store: Store, record: AgentRecord, client: str | None) -> Path:
        return checkpoint.model_path(store.agent_folder(record.id))

    def stored_checkpoints(self, store: Store, record: AgentRecord) -> list[Path]:
        path = self.stored_model(store, record, None)
        return [path] if path.exists() else []

