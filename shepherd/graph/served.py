"""The agents a graph serves, and their lifecycle verbs: status, restart, export (the model zip, or the
greedy policy as ONNX), delete the model or the curve, end a key's sessions, add, drain, close. Each verb
is one call, safe at any moment (one verb at a time per agent), and works as well on a data folder that no
server serves (an offline graph).

A restart ends the agent's sessions, stops its learner without a checkpoint, deletes its model and starts
a fresh learner; the model is deleted only after any checkpoint in flight is written (every write is a
rename of a whole file, so a reader never sees half a model).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import zipfile
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from shepherd.agents import algorithm_info, checkpoint
from shepherd.agents.export.export import NotExportable, export_adapter
from shepherd.agents.sb3.base import SB3Algorithm
from shepherd.graph.advised import AdvisedAgent
from shepherd.definition import Sharing, check_client_name
from shepherd.graph.runtime import CLIENTS_FOLDER, AgentRuntime, client_folder
from shepherd.graph.schedule import EvaluationResult
from shepherd.graph.sessions import SessionTable
from shepherd.storage import AgentRecord, NotFound, Store

logger = logging.getLogger(__name__)

CHECKPOINT_WAIT_SECONDS = 60.0
NO_MODEL = "no saved model yet; it is written at the agent's first checkpoint, once it has learned"


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


class ServedAgents:
    """The runtimes of the agents being served, by store id, and the verbs that change them.

    ``build`` makes a runtime for a stored agent (blocking: the graph's `GraphManager.build_runtime`): an
    `AgentRuntime` for a pooled agent, an `AdvisedAgent` (a runtime per client) for an advised one; with
    ``in_process=True``, one whose learner's model is in this process (for an export).
    """

    def __init__(self, store: Store, sessions: Callable[[], SessionTable],
                 build: Callable[..., AgentRuntime | AdvisedAgent],
                 start: Callable[[AgentRuntime], None]) -> None:
        self.store = store
        self.runtimes: dict[int, AgentRuntime] = {}
        self.advised: dict[int, AdvisedAgent] = {}  # advised agents, whose runtimes are their clients
        self.failures: dict[int, str] = {}  # stored agents whose learner could not be built, and why
        self._restarting: set[int] = set()
        self._sessions = sessions
        self._build = build
        self._start = start
        self._locks: dict[int, asyncio.Lock] = {}

    def model_path(self, agent_id: int) -> Path:
        return checkpoint.model_path(self.store.agent_folder(agent_id))

    def lock(self, agent_id: int) -> asyncio.Lock:
        """One lifecycle verb at a time per agent."""
        return self._locks.setdefault(agent_id, asyncio.Lock())

    # -- serving ---------------------------------------------------------------------------------
    def install(self, runtime: AgentRuntime | AdvisedAgent) -> None:
        """Start a built runtime's learner (an advised agent's: its clients') and serve it to new sessions."""
        if isinstance(runtime, AdvisedAgent):
            runtime.start(self._start)
            self.advised[runtime.record.id] = runtime
        else:
            self._start(runtime)
            self.runtimes[runtime.record.id] = runtime
        self.failures.pop(runtime.record.id, None)
        self._restarting.discard(runtime.record.id)

    def restarting(self, agent_id: int) -> bool:
        """Whether a restart of the agent is under way (it takes no session meanwhile)."""
        return agent_id in self._restarting

    # -- the verbs -------------------------------------------------------------------------------
    def status(self, record: AgentRecord) -> AgentStatus:
        path = self.model_path(record.id)
        model = _model_file(path)
        advised = self.advised.get(record.id)
        if advised is not None:
            return _advised_status(advised, model)
        runtime = self.runtimes.get(record.id)
        if runtime is not None:
            stats = runtime.stats()
            return AgentStatus(True, stats.phase, stats.steps, stats.steps_per_second, stats.sessions,
                               stats.episodes, stats.mean_train_return, stats.last_evaluation, stats.failure,
                               runtime.last_active, model)
        phase, failure = "stopped", None
        if record.id in self._restarting:
            phase = "restarting"
        elif record.id in self.failures:
            phase, failure = "failed", self.failures[record.id]
        steps = checkpoint.saved_steps(path) if model and phase == "stopped" else 0
        clients = None
        if record.sharing == Sharing.ADVISED.value:  # each client's counters, as its checkpoint has them
            clients = self._saved_clients(record.id)
            steps = sum(row["steps"] for row in clients)
            best = _best_saved(clients)
            model = None if best is None else _model_file(self._client_path(record.id, best))
        return AgentStatus(False, phase, steps, 0.0, 0, 0, None, None, failure, record.last_active, model, clients)

    def _client_path(self, agent_id: int, client: str) -> Path:
        return checkpoint.model_path(client_folder(self.store.agent_folder(agent_id), client))

    def _saved_clients(self, agent_id: int) -> list[dict[str, Any]]:
        """The client rows of an advised agent that is not served, from its clients' checkpoints."""
        rows = []
        for name in self.client_names(agent_id):
            try:
                state = checkpoint.read_state(self._client_path(agent_id, name))
            except (OSError, KeyError, ValueError, zipfile.BadZipFile):
                state = {}
            schedule = state.get("schedule")
            steps = schedule.get("steps", 0) if isinstance(schedule, dict) else 0
            recent = state.get("recent_return")
            rows.append({"client": name, "steps": int(steps) if isinstance(steps, int) else 0, "phase": "stopped",
                         "sessions": 0, "episodes": 0,
                         "recent_return": float(recent) if isinstance(recent, (int, float)) else None,
                         "advisor": None, "mean_train_return": None, "failure": None})
        return rows

    def _saved_best(self, agent_id: int) -> str | None:
        """The saved client with the best recent evaluation return (else the most trained) of an advised agent
        not served here."""
        return _best_saved(self._saved_clients(agent_id))

    async def add(self, record: AgentRecord, serve: bool) -> None:
        """Build the learner of a new agent (proving SB3 accepts it) and, if ``serve``, serve it.

        Raises:
            Exception: whatever building the learner raised.
        """
        runtime = await asyncio.to_thread(self._build, record, in_process=not serve)  # not served: no remote learner
        if serve:
            self.install(runtime)
        else:
            await asyncio.to_thread(runtime.discard)

    def every_runtime(self) -> list[AgentRuntime]:
        """Every learner's runtime: each pooled agent's, and each client's of an advised agent
        (`AgentRuntime.client` names it)."""
        runtimes = list(self.runtimes.values())
        for advised in list(self.advised.values()):
            runtimes.extend(runtime for _, runtime in sorted(advised.clients.items()))
        return runtimes

    def client_failures(self) -> list[tuple[AgentRecord, str, str]]:
        """The clients of served advised agents whose learner could not be built: agent, client, reason."""
        return [(advised.record, name, reason) for advised in list(self.advised.values())
                for name, reason in sorted(advised.failures.items())]

    def served_ids(self) -> set[int]:
        return set(self.runtimes) | set(self.advised)

    async def restart(self, agent_id: int) -> int:
        """End the agent's sessions, drop its model and counters, and serve a fresh learner if it was
        served (or had failed); returns how many sessions ended.

        Raises:
            Exception: the fresh learner cannot be built; the agent stays down, failed with the reason.
        """
        async with self.lock(agent_id):
            was_served = agent_id in self.served_ids() or agent_id in self.failures
            self._restarting.add(agent_id)
            try:
                ended = self._sessions().end_agent(agent_id)
                old: AgentRuntime | AdvisedAgent | None = self.runtimes.pop(agent_id, None) or self.advised.pop(agent_id, None)
                if old is not None:
                    await asyncio.to_thread(old.discard)
                await asyncio.to_thread(_unlink, self.model_path(agent_id))
                await asyncio.to_thread(shutil.rmtree, self.store.agent_folder(agent_id) / "clients", True)
                if was_served:
                    runtime = await asyncio.to_thread(self._build, self.store.agent(agent_id))
                    self.install(runtime)
            except BaseException as error:
                if was_served:
                    self.failures[agent_id] = f"could not be restarted: {type(error).__name__}: {error}"
                raise
            finally:
                self._restarting.discard(agent_id)
        return ended

    async def delete(self, agent_id: int) -> tuple[int, Path | None]:
        """Delete the agent: end its sessions (their clients get `Gone` from now on), stop its learner
        without a checkpoint, and delete it from the store (its keys with it; its folder goes to the data
        folder's trash). Returns how many sessions ended and where the folder went.

        Raises:
            NotFound: no such agent.
        """
        async with self.lock(agent_id):
            record = self.store.agent(agent_id)
            ended = self._sessions().end_agent(agent_id, gone=f"agent {record.name} was deleted; its sessions and "
                                                              "API keys no longer work")
            old: AgentRuntime | AdvisedAgent | None = (self.runtimes.pop(agent_id, None)
                                                        or self.advised.pop(agent_id, None))
            self.failures.pop(agent_id, None)
            if old is not None:
                await asyncio.to_thread(old.discard)
            trash = await asyncio.to_thread(self.store.delete_agent, agent_id)
        self._locks.pop(agent_id, None)
        return ended, trash

    async def set_parameters(self, agent_id: int, values: dict[str, Any]) -> bool:
        """Hand checked live parameter values (`shepherd.agents.live.check_live`) to the agent's learner,
        which takes them before its next update, then keep them in the store (a restart builds the learner
        with them). Returns whether a running learner took them (False: stored only).

        Raises:
            NotFound: no such agent.
            Exception: what the learner raised setting them (nothing is stored then).
        """
        async with self.lock(agent_id):
            record = self.store.agent(agent_id)
            runtime = self.runtimes.get(agent_id)
            live = runtime is not None and runtime.learner.failure is None
            if runtime is not None and live:
                await asyncio.wait_for(asyncio.wrap_future(runtime.learner.set_parameters(values)),
                                       CHECKPOINT_WAIT_SECONDS)
            record = await asyncio.to_thread(self.store.update_agent, agent_id,
                                             parameters={**record.parameters, **values})
            if runtime is not None:
                runtime.record = record
        return live

    async def export(self, agent_id: int, client: str | None = None) -> bytes:
        """The agent's model zip; a served agent checkpoints first, so that it has its latest weights. An
        advised agent's is one client's: the one named, or the best (by recent evaluation return).

        Raises:
            NotFound: the agent has no saved model yet, or no such client.
        """
        path = self.model_path(agent_id)
        async with self.lock(agent_id):
            runtime = self.runtimes.get(agent_id)
            advised = self.advised.get(agent_id)
            if advised is not None:
                runtime = (advised.clients.get(client) if client is not None else
                           advised.best() or advised.most_trained())
                if runtime is None:
                    raise NotFound(f"no client {client!r}" if client else "no client yet")
                path = runtime.model_path
            elif runtime is None and self.store.agent(agent_id).sharing == Sharing.ADVISED.value:
                name = client or self._saved_best(agent_id)
                if name is None:
                    raise NotFound("no client yet")
                path = self._client_path(agent_id, name)
            if runtime is not None and runtime.learner.failure is None and (runtime.tracker.steps or path.exists()):
                await _settle(runtime.checkpoint(), runtime.record.name)
            try:
                return await asyncio.to_thread(path.read_bytes)
            except FileNotFoundError:
                raise NotFound(NO_MODEL) from None

    async def export_onnx(self, agent_id: int, client: str | None = None) -> bytes:
        """The agent's greedy policy as one ONNX file (`shepherd.agents.export.export`), built from its checkpoint;
        a served agent checkpoints first, so that it has its latest weights. An advised agent's is one
        client's own network (the one named, or the best by recent evaluation return), without its advisor:
        the mixed policy needs the advisor's network, which a deployed client does not have.

        Raises:
            NotFound: the agent (or the client) has no saved model yet, or no such client.
            NotExportable: the policy has no exact ONNX form (RecurrentPPO's, say); the message says why.
        """
        async with self.lock(agent_id):
            advised = self.advised.get(agent_id)
            if advised is not None:
                runtime = self._client_runtime(advised, client)
                if runtime.learner.failure is None and (runtime.tracker.steps or runtime.model_path.exists()):
                    await _settle(runtime.checkpoint(), runtime.label)
                if not runtime.model_path.exists():
                    raise NotFound(NO_MODEL)
                client = runtime.client
            elif self.store.agent(agent_id).sharing != Sharing.ADVISED.value:  # (one not served here: `_onnx`
                await self._checkpoint_first(agent_id)  # builds its clients from their checkpoints)
                if not self.model_path(agent_id).exists():
                    raise NotFound(NO_MODEL)
            return await asyncio.to_thread(self._onnx, self.store.agent(agent_id), client)

    @staticmethod
    def _client_runtime(advised: AdvisedAgent, client: str | None) -> AgentRuntime:
        runtime = advised.clients.get(client) if client is not None else advised.best() or advised.most_trained()
        if runtime is None:
            raise NotFound(f"no client {client!r}" if client else "no client yet")
        return runtime

    def _onnx(self, record: AgentRecord, client: str | None) -> bytes:
        built = self._build(record, in_process=True)  # learners resumed from their checkpoints, never started
        try:
            runtime = self._client_runtime(built, client) if isinstance(built, AdvisedAgent) else built
            if not runtime.model_path.exists():
                raise NotFound(NO_MODEL)
            adapter = runtime.learner.algorithm
            if not isinstance(adapter, SB3Algorithm):
                raise NotExportable(f"agent {record.name}'s learner is not a stable-baselines3 one")
            return export_adapter(adapter, record.name, algorithm_info(record.algorithm).name, client=runtime.client)
        finally:
            built.discard()

    def client_names(self, agent_id: int) -> list[str]:
        """An advised agent's client names: those served (and those that failed), or, for one not served
        here, those with a folder of their own."""
        advised = self.advised.get(agent_id)
        if advised is not None:
            return sorted(set(advised.clients) | set(advised.failures))
        folder = self.store.agent_folder(agent_id) / CLIENTS_FOLDER
        names = []
        for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
            try:
                names.append(check_client_name(entry.name))
            except ValueError:
                continue
        return names

    async def _checkpoint_first(self, agent_id: int) -> None:
        runtime = self.runtimes.get(agent_id)
        if runtime is not None and runtime.learner.failure is None and (
                runtime.tracker.steps or self.model_path(agent_id).exists()):
            await _settle(runtime.checkpoint(), runtime.record.name)

    async def delete_model(self, agent_id: int) -> bool:
        """Delete the saved model (a served agent keeps its weights and saves them again at its next
        checkpoint); returns whether there was one."""
        async with self.lock(agent_id):
            advised = self.advised.get(agent_id)
            if advised is not None:  # every client's (each keeps its weights and its name)
                deleted = False
                for client in list(advised.clients.values()):
                    if client.pending_checkpoint is not None:
                        await _settle(client.pending_checkpoint, client.label)
                    deleted = await asyncio.to_thread(_unlink, client.model_path) or deleted
                return deleted
            runtime = self.runtimes.get(agent_id)
            if runtime is not None and runtime.pending_checkpoint is not None:
                await _settle(runtime.pending_checkpoint, runtime.record.name)  # never delete under a write
            return await asyncio.to_thread(_unlink, self.model_path(agent_id))

    async def delete_curve(self, agent_id: int) -> None:
        """Forget the agent's episode returns, on disk and in memory."""
        async with self.lock(agent_id):
            await asyncio.to_thread(self.store.clear_returns, agent_id)
            runtime = self.runtimes.get(agent_id)
            if runtime is not None:
                runtime.clear_curve_memory()
            for client in getattr(self.advised.get(agent_id), "clients", {}).values():
                client.clear_curve_memory()

    def end_key_sessions(self, key_digest: str) -> int:
        """End every session opened with one API key (by its hash); returns how many ended."""
        return self._sessions().end_client(key_digest)

    # -- the whole graph ---------------------------------------------------------------------------
    def checkpoint_all(self) -> None:
        for runtime in self.runtimes.values():
            runtime.checkpoint()
        for advised in self.advised.values():
            advised.checkpoint_all()

    def drain(self) -> None:
        """The server is stopping: every learner answers what it holds back, now and from now on."""
        for runtime in self.runtimes.values():
            runtime.learner.drain()
        for advised in self.advised.values():
            advised.drain()

    def abort(self) -> None:
        """Stop the learners started so far without writing anything (a start that failed half-way)."""
        for runtime in self.runtimes.values():
            runtime.learner.close()
        self.runtimes.clear()
        for advised in self.advised.values():
            advised.abort()
        self.advised.clear()

    def close(self) -> None:
        """Checkpoint every agent and stop the learners. Blocks: run it off the event loop."""
        for runtime in self.runtimes.values():
            runtime.close()
        self.runtimes.clear()
        for advised in self.advised.values():
            advised.close()
        self.advised.clear()


async def _settle(future: Future[Any], name: str) -> None:
    """Wait for a checkpoint; a failed or slow one is logged, and the last whole file stays."""
    try:
        await asyncio.wait_for(asyncio.wrap_future(future), CHECKPOINT_WAIT_SECONDS)
    except asyncio.CancelledError:
        raise
    except Exception as error:  # noqa: BLE001 - the file on disk is whole either way
        logger.warning("agent %s: checkpoint not written (%s: %s)", name, type(error).__name__, error)


def _unlink(path: Path) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def _best_saved(rows: list[dict[str, Any]]) -> str | None:
    """The client row with the best recent evaluation return, else the most trained (None: no row)."""
    rated = [row for row in rows if row["recent_return"] is not None]
    best = max(rated, key=lambda r: r["recent_return"], default=None) or max(rows, key=lambda r: r["steps"], default=None)
    return None if best is None else best["client"]


def _model_file(path: Path) -> dict[str, float] | None:
    """A saved model's size and time, as `AgentStatus.model` has them (None: there is none)."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return {"bytes": stat.st_size, "modified": stat.st_mtime}


def _advised_status(advised: AdvisedAgent, model: dict[str, float] | None) -> AgentStatus:
    """An advised agent's status: its clients' sums, its best client's last evaluation, each client's row."""
    clients = list(advised.clients.values())
    stats = [runtime.stats() for runtime in clients]
    best = advised.best()
    failing = [s.failure for s in stats if s.failure] + list(advised.failures.values())
    # a new client's first episode trains (on-policy: no heatup); each client's own phase is in its row
    phase = "failed" if failing and len(failing) == len(stats) + len(advised.failures) else "train"
    trained = [s.mean_train_return for s in stats if s.mean_train_return is not None]
    if best is not None:
        model = {"bytes": best.model_path.stat().st_size, "modified": best.model_path.stat().st_mtime} \
            if best.model_path.exists() else model
    return AgentStatus(
        True, phase, sum(s.steps for s in stats), sum(s.steps_per_second for s in stats),
        sum(s.sessions for s in stats), sum(s.episodes for s in stats),
        max(trained) if trained else None, None if best is None else best.stats().last_evaluation,
        "; ".join(failing) if failing and phase == "failed" else None,
        max((r.last_active for r in clients), default=advised.record.last_active), model,
        advised.describe_clients())
