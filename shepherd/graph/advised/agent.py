"""An ``advised`` agent: one runtime (learner, phase tracker, checkpoints) per named client, and who advises
whom.

A login to an advised agent names its client (``"client": "arm-3"``). The first login of a name builds
that client's learner (the agent's algorithm and parameters), starting from the weights of the client
with the best recent evaluation return, if any has one; its checkpoint lives in
``agents/<id>/clients/<name>/model.zip`` and is written at once, so the name persists: a restarted server
restores every client it finds there. Its first episodes try each rated client's policy on its own system
(plug-in trials, until one does as well as any client's evaluation), and it adopts the best-rated one
that worked there before it learns. An agent takes at most ``max_clients`` names (``run.py --max-clients``,
64 by default): each is a learner thread, a model and a folder, so a login with one more is refused
(`TooManyClients`). After every evaluation, each client is given as advisor the other
client with the best recent evaluation return, if that is better than its own (`choose_advisors`); the
advice itself is the learner's (`shepherd.agents.advice`). Every client has its own learner thread: one
that fails fails alone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any, Callable

from shepherd.agents import AgentFailed, LearnerUnavailable, ServedLearner
from shepherd.agents.core import Advised, StartsFrom
from shepherd.definition import check_client_name
from shepherd.graph.advised.advising import Advising
from shepherd.graph.agent import MAX_CLIENTS, AgentStatus, BadClient, ServedAgent, settle
from shepherd.graph.runtime import CLIENTS_FOLDER, AgentRuntime, AgentStats, saved_client_names
from shepherd.graph.schedule import EvaluationResult, Schedule
from shepherd.storage import AgentRecord, NotFound, Store

logger = logging.getLogger(__name__)


class TooManyClients(BadClient):
    """A login names a new client of an advised agent that has the most clients the server allows (HTTP 400)."""


class AdvisedAgent(Advising, ServedAgent):
    """The client runtimes of one advised agent, by client name. Runs on the graph's thread, except
    `build_client` and `restore` (they build models and read checkpoints: run them off the event loop)."""

    takes_client_names = True

    def __init__(self, record: AgentRecord, schedule: Schedule, store: Store,
                 build_learner: Callable[[str], ServedLearner],
                 on_evaluation: Callable[[AgentRuntime, EvaluationResult], None] | None = None,
                 max_clients: int | None = MAX_CLIENTS) -> None:
        super().__init__(float(record.parameters.get("advice_strength", 0.3)) > 0.0)  # 0: independent learners
        self.record = record
        self.max_clients = max_clients  # None: no limit
        self.schedule = schedule
        self.store = store
        self.clients: dict[str, AgentRuntime] = {}
        self.failures: dict[str, str] = {}  # client names whose learner could not be built, and why
        self._build_learner = build_learner
        self._on_evaluation = on_evaluation
        self._start: Callable[[AgentRuntime], None] = lambda runtime: None
        self._new: set[str] = set()  # clients built without a checkpoint of their own, not installed yet

    @property
    def folder(self) -> Path:
        return self.store.agent_folder(self.record.id) / CLIENTS_FOLDER

    def saved_names(self) -> list[str]:
        """The client names with a folder in the agent's (those that logged in before)."""
        return saved_client_names(self.store.agent_folder(self.record.id))

    @property
    def runtimes(self) -> list[AgentRuntime]:
        """Each client's runtime, by name."""
        return [runtime for _, runtime in sorted(self.clients.items())]

    def client_names(self) -> list[str]:
        """The clients served, and those that failed."""
        return sorted(set(self.clients) | set(self.failures))

    # -- building ------------------------------------------------------------------------------------
    def build_client(self, name: str) -> AgentRuntime:
        """A runtime for a client name, not started: resumed from its checkpoint, or else starting from the
        best client's saved weights. Blocks.

        Raises:
            ParameterError: the learner cannot be built; StoreError: its checkpoint cannot be loaded.
        """
        learner = self._build_learner(name)
        runtime = AgentRuntime(self.record, learner, self.schedule, self.store, self._evaluated, client=name,
                               on_trial=self._tried)
        try:
            if runtime.resume():
                return runtime
            best = self.best()
            if best is not None and best.model_path.exists():
                if isinstance(learner.algorithm, StartsFrom):
                    learner.algorithm.start_from(best.model_path)
                    logger.info("client %s starts from the weights of client %s (recent evaluation %.1f)",
                                runtime.label, best.client, best.recent_return or 0.0)
        except BaseException:  # a Ray actor served for it must not outlive it, keeping its name (as Pooled.build)
            runtime.discard(10.0)
            raise
        self._new.add(name)
        return runtime

    def restore(self) -> None:
        """Build every saved client (not started); one that cannot be built is failed alone. Blocks."""
        for name in self.saved_names():
            try:
                self.clients[name] = self.build_client(name)
            except Exception as error:  # noqa: BLE001 - one client's damage must not stop the others
                self.failures[name] = f"cannot be started: {type(error).__name__}: {error}"
                logger.error("client %s/%s cannot be started: %s", self.record.name, name, error)

    def start(self, start: Callable[[AgentRuntime], None]) -> None:
        """Start the restored clients' learners; ``start`` starts each learner added later too."""
        self._start = start
        for runtime in self.clients.values():
            start(runtime)
        self.choose_advisors()

    def install(self, runtime: AgentRuntime) -> AgentRuntime:
        """Serve a built client (the one already there if two logins built it at once); it checkpoints at
        once, so that its name outlives a restart."""
        assert runtime.client is not None
        present = self.clients.get(runtime.client)
        if present is not None:
            runtime.discard()
            return present
        self._start(runtime)
        self.clients[runtime.client] = runtime
        self.failures.pop(runtime.client, None)
        runtime.checkpoint()
        if runtime.client in self._new:
            self._new.discard(runtime.client)
            self._plug_in(runtime)
        self.choose_advisors()
        return runtime

    # -- sessions ------------------------------------------------------------------------------------
    def session_runtime(self, client: str | None, evaluate_only: bool) -> AgentRuntime:
        """The runtime a login opens its session on: the named client's (built now if new: this blocks),
        or, for an evaluation without a name, the best client's.

        Raises:
            BadClient: no name on a training login, a bad name, or no client to evaluate yet.
            TooManyClients: a new name, and the agent has ``max_clients`` already.
        """
        if client is None:
            if not evaluate_only:
                raise BadClient(f"agent {self.record.name} is advised: a login names its client, as "
                                "{\"apikey\": ..., \"client\": \"arm-3\"}")
            best = self.best() or self.most_trained()
            if best is None and (self.clients or self.failures):
                raise AgentFailed(f"agent {self.record.name}: every client failed ({'; '.join(self._failing())}); "
                                  "an admin can restart the agent")
            if best is None:
                raise BadClient(f"agent {self.record.name} has no client yet: name the client to evaluate")
            return best
        try:
            name = check_client_name(client)
        except ValueError as error:
            raise BadClient(str(error)) from None
        runtime = self.clients.get(name)
        if runtime is None:
            self.check_room(name)
            runtime = self.install(self._built(name))
        return runtime

    def needs_build(self, client: str | None) -> bool:
        return client is not None and client not in self.clients and client not in self.failures

    def _built(self, name: str) -> AgentRuntime:
        """`build_client`, for a login.

        Raises:
            AgentFailed (a 503): the client failed before (its checkpoint could not be loaded at the start), or its
                learner cannot be built now; it stays failed until an admin restarts the agent.
        """
        if name in self.failures:
            raise AgentFailed(f"agent {self.record.name}, client {name}: {self.failures[name]}; an admin can "
                              "restart the agent")
        try:
            return self.build_client(name)
        except LearnerUnavailable:  # (a Ray cluster that cannot place its actor yet) a 503: the login is retried
            raise
        except Exception as error:  # noqa: BLE001 - a damaged checkpoint or a learner that cannot be built
            self.failures[name] = f"cannot be started: {type(error).__name__}: {error}"
            logger.error("client %s/%s cannot be started: %s", self.record.name, name, error)
            raise AgentFailed(f"agent {self.record.name}, client {name}: {self.failures[name]}; an admin can "
                              "restart the agent") from error

    def _failing(self) -> list[str]:
        return [f"{name}: {runtime.learner.failure}" for name, runtime in sorted(self.clients.items())
                if runtime.learner.failure is not None] + [f"{name}: {why}" for name, why in sorted(self.failures.items())]

    def check_room(self, name: str) -> None:
        """Raises TooManyClients if ``name`` is new and the agent has ``max_clients`` (served or failed)."""
        known = set(self.clients) | set(self.failures)
        if self.max_clients is None or name in known or len(known) < self.max_clients:
            return
        raise TooManyClients(
            f"agent {self.record.name} has {len(known)} clients, the most this server allows an advised agent "
            f"(each is a learner of its own): log in as one of them (the agent's 'clients' in the admin API), or "
            f"ask the server's operator to raise it with run.py --max-clients N (run.py agents restart forgets "
            f"every client of the agent)")

    async def prepare(self, client: str | None, lock: asyncio.Lock, serving: Callable[[], bool]) -> None:
        """Build a new client's learner off the event loop before its login (nothing to do for a known
        name): the best client checkpoints first, so that the new one starts from its latest weights.

        Raises:
            BadClient: a malformed name.
            TooManyClients: a new name, and the agent has ``max_clients`` already.
        """
        if client is None or not self.needs_build(client):
            if client is not None and client in self.failures:
                self._built(client)  # raises its failure
            return
        try:
            name = check_client_name(client)
        except ValueError as error:
            raise BadClient(str(error)) from None
        async with lock:
            if not self.needs_build(name):
                return
            self.check_room(name)  # before anything is built
            best = self.best()
            if best is not None:  # (one failed or slow is logged: it starts from the last checkpoint written)
                await settle(best.checkpoint(), best.label)
            runtime = await asyncio.to_thread(self._built, name)
            if serving():  # not restarted meanwhile
                self.install(runtime)
            else:
                await asyncio.to_thread(runtime.discard)

    def export_runtime(self, client: str | None) -> AgentRuntime:
        """The named client's, or the best (by recent evaluation return; else the most trained)."""
        runtime = self.clients.get(client) if client is not None else self.best() or self.most_trained()
        if runtime is None:
            raise NotFound(f"no client {client!r}" if client else "no client yet")
        return runtime

    def _evaluated(self, runtime: AgentRuntime, result: EvaluationResult) -> None:
        self.choose_advisors()
        if self._on_evaluation is not None:
            self._on_evaluation(runtime, result)

    # -- display -------------------------------------------------------------------------------------
    def describe_clients(self) -> list[dict[str, Any]]:
        """Each client: name, steps, phase, sessions, recent evaluation return, its advisor, failure."""
        rows = []
        for name, runtime in sorted(self.clients.items()):
            stats = runtime.stats()
            algorithm = runtime.learner.algorithm
            advisor = algorithm.advice.advisor.name if isinstance(algorithm, Advised) and algorithm.advice.advisor \
                else None
            rows.append({"client": name, "steps": stats.steps, "phase": stats.phase, "sessions": stats.sessions,
                         "episodes": stats.episodes, "recent_return": runtime.recent_return, "advisor": advisor,
                         "mean_train_return": stats.mean_train_return, "failure": stats.failure})
        for name, reason in sorted(self.failures.items()):
            rows.append({"client": name, "steps": 0, "phase": "failed", "sessions": 0, "episodes": 0,
                         "recent_return": None, "advisor": None, "mean_train_return": None, "failure": reason})
        return rows

    def status(self, model: dict[str, float] | None) -> AgentStatus:
        """Its clients' sums, its best client's last evaluation and model, each client's row."""
        clients = list(self.clients.values())
        stats = [runtime.stats() for runtime in clients]
        best = self.best()
        failing = [s.failure for s in stats if s.failure] + list(self.failures.values())
        # a new client's first episode trains (on-policy: no heatup); each client's own phase is in its row
        phase = "failed" if failing and len(failing) == len(stats) + len(self.failures) else "train"
        trained = [s.mean_train_return for s in stats if s.mean_train_return is not None]
        if best is not None:
            model = {"bytes": best.model_path.stat().st_size, "modified": best.model_path.stat().st_mtime} \
                if best.model_path.exists() else model
        return AgentStatus(
            True, phase, sum(s.steps for s in stats), sum(s.steps_per_second for s in stats),
            sum(s.sessions for s in stats), sum(s.episodes for s in stats),
            max(trained) if trained else None, None if best is None else best.stats().last_evaluation,
            "; ".join(failing) if failing and phase == "failed" else None,
            max((r.last_active for r in clients), default=self.record.last_active), model,
            self.describe_clients())

    def stats(self) -> AgentStats | None:
        """Its clients' sums, its phase ``failed`` only when every client failed, its evaluation the best
        client's (None: no client yet)."""
        if not self.clients:
            return None
        every = [client.stats() for client in self.clients.values()]
        best = self.best()
        failures = [s.failure for s in every if s.failure]
        trained = [s.mean_train_return for s in every if s.mean_train_return is not None]
        return AgentStats(
            agent=self.record.name, steps=sum(s.steps for s in every),
            steps_per_second=sum(s.steps_per_second for s in every),
            phase="failed" if len(failures) == len(every) else "train", sessions=sum(s.sessions for s in every),
            episodes=sum(s.episodes for s in every), mean_train_return=max(trained) if trained else None,
            last_evaluation=None if best is None else best.stats().last_evaluation,
            failure="; ".join(failures) if len(failures) == len(every) else None)

    def summary(self) -> str:
        clients = ", ".join(f"{name} ({runtime.tracker.steps} steps)" for name, runtime in sorted(self.clients.items()))
        return (f"{self.record.algorithm}, advised (a learner per named client; docs/advice.md); clients so far: "
                f"{clients or 'none'}")

    # -- lifecycle -----------------------------------------------------------------------------------
    def abort(self) -> None:
        super().abort()
        self.clients.clear()

    def discard(self, timeout: float = 60.0) -> bool:
        """Stop every client's learner at once without checkpointing (`AgentRuntime.discard`), waiting up to
        ``timeout`` seconds for them all; returns whether they all stopped. Blocks."""
        for runtime in self.clients.values():  # every one is told first: they stop side by side
            runtime.discard(0.0)
        deadline = time.monotonic() + timeout
        stopped = [runtime.discard(max(0.0, deadline - time.monotonic())) for runtime in self.clients.values()]
        self.clients.clear()
        return all(stopped)

    def close(self) -> None:
        """Checkpoint every client and stop its learner. Blocks."""
        super().close()
        self.clients.clear()
