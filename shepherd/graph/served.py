"""The agents a graph serves, and their lifecycle verbs: status, restart, export (the model zip, or the
greedy policy as ONNX), delete the model or the curve, end a key's sessions, add, drain, close. Each verb
is one call, safe at any moment (one verb at a time per agent), and works as well on a data folder that no
server serves (an offline graph).

A restart ends the agent's sessions, stops its learner without a checkpoint, deletes its model and starts
a fresh learner (every write is a rename of a whole file, so a reader never sees half a model). A restart or a
delete stops the old learner at once: an update in progress ends at its next optimiser step, a checkpoint it is
writing is given up before its rename (`shepherd.storage.files.abandoned_when`), and the verb waits for it at
most `STOP_WAIT_SECONDS` (the result says when it did not stop within them).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import shutil
import threading
from pathlib import Path
from typing import Any, Callable, TypeVar

from shepherd.agents import algorithm_info, checkpoint
from shepherd.agents.export.export import NotExportable, export_adapter
from shepherd.agents.sb3.base import SB3Algorithm
from shepherd.graph.kinds import kind_of
from shepherd.graph.agent import (NO_MODEL, AgentStatus, ServedAgent, model_file, of_kind, settle,
                                  unlink_model)
from shepherd.graph.lessons import stored_state as lesson_state
from shepherd.graph.runtime import AgentRuntime, saved_client_names
from shepherd.graph.session_table import SessionTable
from shepherd.storage import AgentRecord, NotFound, Store

logger = logging.getLogger(__name__)

#: how long set-param waits for the learner to take new values between two batches (a learner inside a longer
#: update takes them when it ends)
SET_WAIT_SECONDS = 5.0
#: how long a restart or a delete waits for the old learner to stop (it is interrupted at its next optimiser
#: step: it takes longer only inside one very long step)
STOP_WAIT_SECONDS = 10.0
#: how much longer a deleted agent's learner that did not stop within the delete's wait is waited for, in a thread
#: of its own, before what it wrote meanwhile is moved to the trash
LATE_STOP_SECONDS = 600.0

A = TypeVar("A", bound=ServedAgent)


class ServedAgents:
    """The agents being served, by store id (each a `ServedAgent` of its sharing mode's kind), and the verbs
    that change them.

    ``build`` makes a served agent from a stored one (blocking: the graph's `GraphManager.build_agent`), not
    started; with ``in_process=True``, one whose learners' models are in this process (for an export).
    """

    def __init__(self, store: Store, sessions: Callable[[], SessionTable], build: Callable[..., ServedAgent],
                 start: Callable[[AgentRuntime], None]) -> None:
        self.store = store
        self.agents: dict[int, ServedAgent] = {}
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

    def agent(self, agent_id: int, kind: type[A]) -> A:
        """The served agent of a store id, as ``kind``.

        Raises:
            KeyError: not served here; TypeError: served, as another kind.
        """
        return of_kind(self.agents.get(agent_id), kind, agent_id)

    # -- serving ---------------------------------------------------------------------------------
    def install(self, agent: ServedAgent) -> None:
        """Start a built agent's learners and serve it to new sessions."""
        agent.start(self._start)
        self.agents[agent.record.id] = agent
        self.failures.pop(agent.record.id, None)
        self._restarting.discard(agent.record.id)

    def restarting(self, agent_id: int) -> bool:
        """Whether a restart of the agent is under way (it takes no session meanwhile)."""
        return agent_id in self._restarting

    @property
    def runtimes(self) -> dict[int, AgentRuntime]:
        """The runtime of each agent served by one learner, by store id."""
        return {agent_id: agent.runtime for agent_id, agent in list(self.agents.items()) if agent.runtime is not None}

    def every_runtime(self) -> list[AgentRuntime]:
        """Every learner's runtime: each agent's (`ServedAgent.runtimes`: an advised agent's clients, each
        named by `AgentRuntime.client`)."""
        return [runtime for agent in list(self.agents.values()) for runtime in agent.runtimes]

    def client_failures(self) -> list[tuple[AgentRecord, str, str]]:
        """The clients of served agents whose learner could not be built: agent, client, reason."""
        return [(agent.record, name, reason) for agent in list(self.agents.values())
                for name, reason in sorted(agent.failures.items())]

    def by_name(self, owner_id: int, name: str) -> ServedAgent | None:
        """The served agent an owner calls ``name`` (None: none, or not served here)."""
        record = self.store.find_agent(owner_id, name)
        return None if record is None else self.agents.get(record.id)

    def served_ids(self) -> set[int]:
        return set(self.agents)

    async def prepare(self, agent_id: int, client: str | None) -> None:
        """What a login with ``client`` needs built off the event loop (`ServedAgent.prepare`); nothing for an
        agent not served here."""
        agent = self.agents.get(agent_id)
        if agent is not None:
            await agent.prepare(client, self.lock(agent_id), lambda: self.agents.get(agent_id) is agent)
            for other in agent.prepared_with():  # a selector's advised skill builds the client's learner too
                if other != agent_id:
                    await self.prepare(other, client)

    # -- the verbs -------------------------------------------------------------------------------
    def status(self, record: AgentRecord) -> AgentStatus:
        model = model_file(self.model_path(record.id))
        agent = self.agents.get(record.id)
        if agent is not None:
            return agent.status(model)
        phase, failure = "stopped", None
        if record.id in self._restarting:
            phase = "restarting"
        elif record.id in self.failures:
            phase, failure = "failed", self.failures[record.id]
        return kind_of(record).stored_status(self.store, record, phase, failure, model)

    async def add(self, record: AgentRecord, serve: bool) -> None:
        """Build the learner of a new agent (proving SB3 accepts it) and, if ``serve``, serve it.

        Raises:
            Exception: whatever building the learner raised.
        """
        agent = await asyncio.to_thread(self._build, record, in_process=not serve)  # not served: no remote learner
        if serve:
            self.install(agent)
        else:
            await asyncio.to_thread(agent.discard)

    async def restart(self, agent_id: int) -> tuple[int, bool]:
        """End the agent's sessions, stop its learner at once, drop its model and counters, and serve a
        fresh learner if it was served (or had failed); returns how many sessions ended, and whether the
        old learner stopped within `STOP_WAIT_SECONDS` (if not, it ends at its next optimiser step).

        Raises:
            Exception: the fresh learner cannot be built; the agent stays down, failed with the reason.
        """
        async with self.lock(agent_id):
            was_served = agent_id in self.served_ids() or agent_id in self.failures
            self._restarting.add(agent_id)
            try:
                ended = self._sessions().end_agent(agent_id)
                stopped = await self._stop(self.agents.pop(agent_id, None))  # (a checkpoint it was writing is
                # given up, not landed over the fresh learner's place: `abandoned_when`)
                await asyncio.to_thread(unlink_model, self.model_path(agent_id))
                for inner in ("clients", "selfplay"):  # an advised agent's clients, the self-play's snapshot files
                    await asyncio.to_thread(shutil.rmtree, self.store.agent_folder(agent_id) / inner, True)
                if was_served:
                    agent = await asyncio.to_thread(self._build, self.store.agent(agent_id))
                    self.install(agent)
            except BaseException as error:
                if was_served:
                    self.failures[agent_id] = f"could not be restarted: {type(error).__name__}: {error}"
                raise
            finally:
                self._restarting.discard(agent_id)
        return ended, stopped

    async def _stop(self, old: ServedAgent | None) -> bool:
        """Stop an agent's learners at once without a checkpoint, waiting at most `STOP_WAIT_SECONDS`;
        returns whether they stopped (None: nothing to stop)."""
        if old is None:
            return True
        stopped = await asyncio.to_thread(old.discard, STOP_WAIT_SECONDS)
        if not stopped:
            logger.warning("agent %s: its learner did not stop within %g s (inside one long step); it ends at its "
                           "next optimiser step", old.record.name, STOP_WAIT_SECONDS)
        return stopped

    async def delete(self, agent_id: int) -> tuple[int, Path | None, bool]:
        """Delete the agent: end its sessions (their clients get `Gone` from now on), stop its learner at
        once without a checkpoint, and delete it from the store (its keys with it; its folder goes to the
        data folder's trash). Returns how many sessions ended, where the folder went, and whether the
        learner stopped within `STOP_WAIT_SECONDS` (if not, it ends at its next optimiser step).

        Raises:
            NotFound: no such agent.
        """
        async with self.lock(agent_id):
            record = self.store.agent(agent_id)
            ended = self._sessions().end_agent(agent_id, gone=f"agent {record.name} was deleted; its sessions and "
                                                              "API keys no longer work")
            old = self.agents.pop(agent_id, None)
            self.failures.pop(agent_id, None)
            stopped = await self._stop(old)
            trash = await asyncio.to_thread(self.store.delete_agent, agent_id)
        self._locks.pop(agent_id, None)
        if old is not None and not stopped:  # it may yet write (a checkpoint in flight) where the folder was
            threading.Thread(target=self._trash_when_stopped, args=(agent_id, record.name, old), daemon=True,
                             name=f"delete-{record.name}").start()
        return ended, trash, stopped

    def _trash_when_stopped(self, agent_id: int, name: str, old: ServedAgent) -> None:
        """Wait (up to `LATE_STOP_SECONDS`) for a deleted agent's learners that did not stop within the delete's
        wait, then move to the trash what they wrote after it where the agent's folder was."""
        if not old.discard(LATE_STOP_SECONDS):
            logger.warning("agent %s (deleted): its learner has not stopped after %g s more", name, LATE_STOP_SECONDS)
        try:
            late = self.store.trash_late_folder(agent_id, name)
        except OSError as error:
            logger.warning("agent %s (deleted): what its learner wrote after the delete stays in %s: %s", name,
                           self.store.agent_folder(agent_id), error)
            return
        if late is not None:
            logger.info("agent %s (deleted): what its learner wrote after the delete went to %s", name, late)

    async def move_stored_lesson(self, agent_id: int, name: str) -> int:
        """Move an agent not served here to its lesson ``name`` in its checkpoints (an advised agent's: every
        client's), its streak at 0, so that it starts there when next served; returns how many checkpoints
        were written (0: it has none yet, and starts in its first lesson). The name is checked by the caller.

        Raises:
            ValueError: the agent is served here or restarting (a served agent moves: `AgentRuntime.move_lesson`).
            OSError, KeyError, zipfile.BadZipFile: a checkpoint cannot be read or written.
        """
        async with self.lock(agent_id):
            if agent_id in self.agents or agent_id in self._restarting:
                raise ValueError(f"agent {agent_id} is served or restarting here: move its runtimes' lesson")
            record = self.store.agent(agent_id)
            paths = kind_of(record).stored_checkpoints(self.store, record)
            for path in paths:
                await asyncio.to_thread(checkpoint.update_state, path, {"lessons": lesson_state(name)})
        return len(paths)

    async def set_parameters(self, agent_id: int, values: dict[str, Any]) -> str:
        """Hand checked live parameter values (`shepherd.agents.live.check_live`) to the agent's learner,
        which takes them before its next update, then keep them in the store (a restart builds the learner
        with them). Returns where they went: ``"live"`` (the learner took them), ``"queued"`` (it is inside
        an update longer than `SET_WAIT_SECONDS` and takes them when that ends; the agent's other verbs are
        not held up meanwhile) or ``"stored"`` (no running learner here, or a learner per client).

        Raises:
            NotFound: no such agent.
            Exception: what the learner raised setting them (nothing is stored then).
        """
        async with self.lock(agent_id):
            record = self.store.agent(agent_id)
            agent = self.agents.get(agent_id)
            runtime = None if agent is None else agent.runtime
            taken = "stored"
            if runtime is not None and runtime.learner.failure is None:
                future = asyncio.wrap_future(runtime.learner.set_parameters(values))
                try:  # shielded: a learner's control future is never cancelled (it sets it later)
                    await asyncio.wait_for(asyncio.shield(future), SET_WAIT_SECONDS)
                    taken = "live"
                except TimeoutError:
                    taken = "queued"
                    future.add_done_callback(functools.partial(_report_late_set, runtime.record.name))
            record = await asyncio.to_thread(self.store.update_agent, agent_id,
                                             parameters={**record.parameters, **values})
            if runtime is not None:
                runtime.record = record
        return taken

    async def export(self, agent_id: int, client: str | None = None) -> bytes:
        """The agent's model zip; a served agent checkpoints first, so that it has its latest weights. An
        advised agent's is one client's: the one named, or the best (by recent evaluation return).

        Raises:
            NotFound: the agent has no saved model yet, or no such client.
        """
        async with self.lock(agent_id):
            agent = self.agents.get(agent_id)
            if agent is None:
                record = self.store.agent(agent_id)
                path = kind_of(record).stored_model(self.store, record, client)
            else:
                runtime = agent.export_runtime(client)
                path = runtime.model_path
                if runtime.learner.failure is None and (runtime.tracker.steps or path.exists()):
                    await settle(runtime.checkpoint(), runtime.record.name)
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
            agent = self.agents.get(agent_id)
            record = self.store.agent(agent_id)
            if agent is None:
                path = kind_of(record).stored_model(self.store, record, client)
            else:
                runtime = agent.export_runtime(client)
                path, client = runtime.model_path, runtime.client
                if runtime.learner.failure is None and (runtime.tracker.steps or path.exists()):
                    await settle(runtime.checkpoint(), runtime.label)
            if not path.exists():
                raise NotFound(NO_MODEL)
            return await asyncio.to_thread(self._onnx, self.store.agent(agent_id), client)

    def _onnx(self, record: AgentRecord, client: str | None) -> bytes:
        built = self._build(record, in_process=True)  # learners resumed from their checkpoints, never started
        try:
            runtime = built.export_runtime(client)
            if not runtime.model_path.exists():
                raise NotFound(NO_MODEL)
            adapter = runtime.learner.algorithm
            if not isinstance(adapter, SB3Algorithm):
                raise NotExportable(f"agent {record.name}'s learner is not a stable-baselines3 one")
            return export_adapter(adapter, record.name, algorithm_info(record.algorithm).name, client=runtime.client)
        finally:
            built.discard()

    def client_names(self, agent_id: int) -> list[str]:
        """An agent's client names: those served (and those that failed), or, for one not served here, those
        with a folder of their own."""
        agent = self.agents.get(agent_id)
        if agent is not None:
            return agent.client_names()
        return saved_client_names(self.store.agent_folder(agent_id))

    async def delete_model(self, agent_id: int) -> bool:
        """Delete the saved model (a served agent keeps its weights and saves them again at its next
        checkpoint; an advised agent's: every client's, each keeping its name); returns whether there was one."""
        async with self.lock(agent_id):
            agent = self.agents.get(agent_id)
            if agent is None:
                return await asyncio.to_thread(unlink_model, self.model_path(agent_id))
            return await agent.delete_models()

    async def delete_curve(self, agent_id: int) -> None:
        """Forget the agent's episode returns, on disk and in memory."""
        async with self.lock(agent_id):
            await asyncio.to_thread(self.store.clear_returns, agent_id)
            agent = self.agents.get(agent_id)
            if agent is not None:
                agent.clear_curve_memory()

    def end_key_sessions(self, key_digest: str) -> int:
        """End every session opened with one API key (by its hash); returns how many ended."""
        return self._sessions().end_client(key_digest)

    # -- the whole graph ---------------------------------------------------------------------------
    def checkpoint_all(self) -> None:
        for agent in self.agents.values():
            agent.checkpoint_all()

    def drain(self) -> None:
        """The server is stopping: every learner answers what it holds back, now and from now on."""
        for agent in self.agents.values():
            agent.drain()

    def abort(self) -> None:
        """Stop the learners started so far without writing anything (a start that failed half-way)."""
        for agent in self.agents.values():
            agent.abort()
        self.agents.clear()

    def close(self) -> None:
        """Checkpoint every agent and stop the learners. Blocks."""
        for agent in self.agents.values():
            agent.close()
        self.agents.clear()


def _report_late_set(name: str, future: asyncio.Future[Any]) -> None:
    """Log the error of parameter values a learner took after set-param had answered (they are stored)."""
    if not future.cancelled() and future.exception() is not None:
        logger.warning("agent %s: its learner refused the new parameter values after its update: %s", name,
                       future.exception())
