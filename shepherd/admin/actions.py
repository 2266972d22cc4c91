"""The seed's special actions on one agent (export the model or its greedy policy as ONNX, delete the model, the
curve or the agent, set live parameters, move to a lesson, restart), on the helpers every admin operation shares
(`OperationsBase`: who may see which agent, how it is named). The actions are the graph's lifecycle verbs
(`shepherd.graph.served`); this module decides who may call them and says what they did."""

from __future__ import annotations

import logging
import zipfile
from typing import TYPE_CHECKING, Any

import orjson

from shepherd.admin.errors import Forbidden, Invalid
from shepherd.admin.records import ActionResult, AgentView, Principal
from shepherd.definition import check_client_name
from shepherd.agents import ParameterError, live
from shepherd.agents.export.export import NotExportable
from shepherd.graph.kinds import kind_of
from shepherd.graph.served import SET_WAIT_SECONDS, STOP_WAIT_SECONDS
from shepherd.wire.spaces import SpaceError
from shepherd.storage import AgentRecord, NotFound

if TYPE_CHECKING:
    from shepherd.admin.service import AdminService

logger = logging.getLogger(__name__)

#: what an agent can be exported as: SB3's model zip, or the greedy policy as one ONNX file
EXPORT_FORMATS = ("sb3", "onnx")
#: what a restart or a delete adds when the old learner did not stop within the time it waits
LINGERING = (f"; its old learner did not stop within {STOP_WAIT_SECONDS:g} s (it is inside one long step) and "
             "ends at its next optimiser step")

class OperationsBase:
    """The admin operations one principal may perform. Each raises:

    Forbidden: an admin operation asked with an agent's key.
    NotFound: no such user, agent or key, or one the caller may not see.
    Invalid: bad input (the message says what to fix).
    AlreadyExists: a user or agent of that name exists.
    """

    def __init__(self, service: AdminService, principal: Principal) -> None:
        self.service = service
        self.principal = principal
        self.store = service.store
        self.graph = service.graph

    # -- helpers -------------------------------------------------------------------------------
    def require_admin(self, what: str) -> None:
        """Raises Forbidden unless the caller is the admin (``what`` names the operation)."""
        if not self.principal.admin:
            raise Forbidden(f"{what} needs the admin token; an agent's API key gives access to that agent only")

    def _record(self, agent_id: int) -> AgentRecord:
        if not self.principal.admin and agent_id != self.principal.agent_id:
            raise NotFound(f"no agent with id {agent_id}")
        return self.store.agent(agent_id)

    def _owner_name(self, record: AgentRecord) -> str:
        try:
            return self.store.user(record.owner_id).name
        except NotFound:
            return f"user{record.owner_id}"

    def _client(self, record: AgentRecord, client: str | None) -> str | None:
        """A client name the caller gives for an advised agent's curve or export, checked.

        Raises:
            Invalid: a malformed name, or a name for a pooled agent.
            NotFound: the agent has no client of that name (the message names those it has).
        """
        if client is None:
            return None
        if not kind_of(record).takes_client_names:
            raise Invalid(f"agent {self._ref(record)} is {record.sharing}: one learner serves every client, so 'client' "
                          "names nothing here (only an advised agent's clients have curves and models of their own)")
        try:
            name = check_client_name(client)
        except ValueError as error:
            raise Invalid(str(error)) from None
        known = sorted(set(self.graph.served.client_names(record.id)) | set(self.store.return_clients(record.id)))
        if name not in known:
            raise NotFound(f"agent {self._ref(record)} has no client {name!r}; " +
                           (f"its clients: {', '.join(known)}" if known else "it has no client yet"))
        return name

    def _ref(self, record: AgentRecord) -> str:
        return f"{self._owner_name(record)}/{record.name}"

    def _view(self, record: AgentRecord) -> AgentView:
        """The agent's view; one whose stored record cannot be read or shown (written by other means, or by a
        version that took what this one refuses) is shown as far as it can be, ``failed`` with why, so that it
        never breaks the listing of the others (and can still be found and deleted)."""
        try:
            view = self._live_view(record)
            orjson.dumps(view)  # what every admin surface does with it (the API's reply, the remote CLI's)
            return view
        except Exception as error:  # noqa: BLE001 - one bad record must not take every listing down
            logger.warning("agent %s: its stored record cannot be shown: %s", record.id, error)
            return self._unshowable_view(record, error)

    def _unshowable_view(self, record: AgentRecord, error: Exception) -> AgentView:
        def shown(value: Any, empty: Any) -> Any:
            try:
                orjson.dumps(value)
                return value
            except TypeError:  # orjson.JSONEncodeError: too deep, or not JSON
                return empty

        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        return AgentView(
            id=record.id, owner=shown(self._owner_name(record), "?"), name=shown(record.name, "?"),
            algorithm=shown(record.algorithm, "?"), observation_space=shown(record.observation_space, None),
            action_space=shown(record.action_space, None), parameters=shown(dict(record.parameters), {}),
            sharing=shown(record.sharing, "?"), filters=shown(dict(record.filters), {}),
            created=shown(record.created, 0.0), last_active=shown(record.last_active, 0.0), model=None, served=False,
            phase="failed", steps=0, steps_per_second=0.0, sessions=0, episodes=0, mean_train_return=None,
            last_evaluation=None, failure=f"its stored record cannot be shown: {reason[:300]}")

    def _live_view(self, record: AgentRecord) -> AgentView:
        status = self.graph.served.status(record)
        evaluation = status.last_evaluation
        return AgentView(
            id=record.id, owner=self._owner_name(record), name=record.name, algorithm=record.algorithm,
            observation_space=record.observation_space, action_space=record.action_space,
            parameters=dict(record.parameters), sharing=record.sharing, filters=dict(record.filters),
            created=record.created,
            model=status.model, served=status.served, phase=status.phase, steps=status.steps,
            steps_per_second=round(status.steps_per_second, 1), sessions=status.sessions,
            episodes=status.episodes, mean_train_return=status.mean_train_return,
            last_evaluation=None if evaluation is None else {
                "period": evaluation.period, "steps": evaluation.steps, "mean_return": evaluation.mean_return},
            failure=status.failure, last_active=status.last_active, clients=status.clients,
            lessons=list(record.lessons) or None, lesson=self._lesson(record.id), level=status.level or record.level)

    def _lesson(self, agent_id: int) -> str | None:
        runtime = self.graph.runtimes.get(agent_id)
        return None if runtime is None else runtime.lessons.name


class SpecialActions(OperationsBase):
    """The special actions of `Operations` (raising what `OperationsBase` says)."""

    # -- special actions -----------------------------------------------------------------------
    async def export_model(self, agent_id: int, client: str | None = None) -> bytes:
        """The agent's model zip (SB3's format, loadable with ``PPO.load``); a served agent checkpoints first
        so that the zip has its latest weights. An advised agent's is one client's: ``client``'s, or the
        best client's (by recent evaluation return).

        Raises:
            NotFound: the agent has no saved model yet, or no such client.
        """
        record = self._record(agent_id)
        client = self._client(record, client)
        try:
            return await self.graph.served.export(agent_id, client)
        except NotFound as error:
            raise NotFound(f"agent {self._ref(record)} has {error}") from None

    async def export_policy(self, agent_id: int, format: str, client: str | None = None) -> bytes:
        """The agent's export in ``format``: ``sb3`` is the model zip (`export_model`), ``onnx`` the greedy
        policy as one ONNX file with its filters and action unscaling (docs/export.md); an advised agent's
        is one client's own network (its metadata says the advice is left out). A served agent
        checkpoints first.

        Raises:
            Invalid: an unknown format, or a policy with no exact ONNX form (the message says why).
            NotFound: the agent has no saved model yet, or no such client.
        """
        if format not in EXPORT_FORMATS:
            raise Invalid(f"unknown export format {format!r}; use one of {', '.join(EXPORT_FORMATS)}")
        if format == "sb3":
            return await self.export_model(agent_id, client)
        record = self._record(agent_id)
        client = self._client(record, client)
        try:
            return await self.graph.served.export_onnx(agent_id, client)
        except NotFound as error:
            raise NotFound(f"agent {self._ref(record)} has {error}") from None
        except NotExportable as error:
            raise Invalid(f"agent {self._ref(record)} cannot be exported as ONNX: {error}") from None

    async def delete_model(self, agent_id: int) -> ActionResult:
        record = self._record(agent_id)
        existed = await self.graph.served.delete_model(agent_id)
        ref = self._ref(record)
        if not existed:
            return ActionResult(False, f"agent {ref} has no saved model")
        if agent_id in self.graph.runtimes:
            return ActionResult(True, f"model of agent {ref} deleted; the agent keeps learning with its current "
                                      "weights and saves them again at its next checkpoint (restart it to forget them)")
        return ActionResult(True, f"model of agent {ref} deleted; it starts from scratch when next served")

    async def delete_returns(self, agent_id: int) -> ActionResult:
        record = self._record(agent_id)
        await self.graph.served.delete_curve(agent_id)
        return ActionResult(True, f"learning curve of agent {self._ref(record)} deleted")

    async def delete_agent(self, agent_id: int) -> ActionResult:
        """Delete an agent: its sessions end (their clients get 410 Gone), its learner stops without a
        checkpoint, its record and API keys go, and its folder (model, returns) moves to the data folder's
        ``trash/``."""
        self.require_admin("deleting agents")
        record = self._record(agent_id)
        ref = self._ref(record)
        ended, trash, stopped = await self.graph.served.delete(agent_id)
        logger.info("agent %s deleted; %d session(s) ended", ref, ended)
        kept = f"; its model and returns moved to {trash}" if trash is not None else ""
        return ActionResult(True, f"agent {ref} deleted: {ended} session(s) ended, its API keys removed{kept}"
                                  f"{'' if stopped else LINGERING}")

    async def set_parameters(self, agent_id: int, values: dict[str, Any]) -> ActionResult:
        """Change parameters a live learner honours (`shepherd.agents.live`): typed and checked as an agent's
        parameters; the learner takes them before its next update and the store keeps them.

        Raises:
            Invalid: a bad name or value, or one that needs a restart (naming those that can change).
        """
        record = self._record(agent_id)
        ref = self._ref(record)
        if not isinstance(values, dict):
            raise Invalid("parameters must be an object of name: value")
        try:
            checked = live.check_live(record.algorithm, values, self.graph.bounds)
        except ParameterError as error:
            raise Invalid(f"agent {ref}: {error}") from None
        taken = await self.graph.served.set_parameters(agent_id, checked)
        shown = ", ".join(f"{name}={value!r}" for name, value in checked.items())
        logger.info("agent %s: %s set", ref, shown)
        where = {"live": "the learner takes it before its next update",
                 "queued": f"the learner is inside an update longer than {SET_WAIT_SECONDS:g} s and takes it when "
                           "that ends",
                 "stored": "its learner is not running here"}[taken]
        return ActionResult(True, f"agent {ref}: {shown} set ({where}; stored, so a restart keeps it)")

    async def set_lesson(self, agent_id: int, name: str) -> ActionResult:
        """Move an agent to its lesson ``name`` by hand (an advised agent: every client). A served one at once,
        checkpointed so that a restart keeps it; its sessions' next announced configs are drawn from it. One
        not served here (no server runs, or this one does not serve it) in its checkpoints, so that the next
        serve starts there.

        Raises:
            Invalid: no such lesson (naming those it has), the agent is restarting, or it is not served and
                has no checkpoint yet (then it starts in its first lesson).
        """
        record = self._record(agent_id)
        ref = self._ref(record)
        names = [lesson["name"] for lesson in record.lessons]
        if name not in names:
            raise Invalid(f"agent {ref} has no lesson {name!r}; " +
                          (f"its lessons: {', '.join(names)}" if names else "it has no lessons"))
        runtimes = list(self.graph.served.every_runtime())
        moving = [runtime for runtime in runtimes if runtime.record.id == agent_id]
        if not moving:
            return await self._set_stored_lesson(agent_id, ref, name, names[0])
        for runtime in moving:
            runtime.move_lesson(name)
        logger.info("agent %s moved to lesson %r by hand", ref, name)
        if any(runtime.learner.failure is not None for runtime in moving):  # a failed learner writes no checkpoint
            return ActionResult(True, f"agent {ref} moved to lesson {name!r}, not checkpointed: its learner failed, "
                                      "and a restart starts it from its last checkpoint's lesson")
        return ActionResult(True, f"agent {ref} moved to lesson {name!r} (checkpointed: a restart keeps it)")

    async def _set_stored_lesson(self, agent_id: int, ref: str, name: str, first: str) -> ActionResult:
        """`set_lesson` of an agent not served here: written into its checkpoints."""
        if self.graph.served.restarting(agent_id):
            raise Invalid(f"agent {ref} is restarting; move its lesson once it is served again")
        try:
            written = await self.graph.served.move_stored_lesson(agent_id, name)
        except (OSError, KeyError, ValueError, zipfile.BadZipFile) as error:
            raise Invalid(f"agent {ref}: its checkpoint cannot take the lesson ({type(error).__name__}: {error})") \
                from None
        if not written:
            raise Invalid(f"agent {ref} is not served and has no checkpoint yet, where a lesson is kept: it starts "
                          f"in its first lesson ({first!r}) when served; serve it, then move it")
        logger.info("agent %s (not served) moved to lesson %r in %d checkpoint(s)", ref, name, written)
        where = "its checkpoint" if written == 1 else f"its {written} clients' checkpoints"
        return ActionResult(True, f"agent {ref} is not served: moved to lesson {name!r} in {where}; it starts "
                                  "there when next served")

    async def restart(self, agent_id: int) -> ActionResult:
        """Forget the agent's model and counters and end its sessions (their keys are refused from now on);
        a served agent gets a fresh learner at once. Also revives an agent whose learner failed."""
        record = self._record(agent_id)
        ref = self._ref(record)
        if not self.service.serving:
            await self.graph.served.restart(agent_id)
            return ActionResult(True, f"agent {ref} restarted: model and counters deleted")
        try:
            ended, stopped = await self.graph.served.restart(agent_id)
        except (ParameterError, SpaceError) as error:
            hint = ("; a live parameter (run.py agents set-param) can be changed while the agent is down, then "
                    "restart it again") if isinstance(error, ParameterError) else ""
            raise Invalid(f"agent {ref} cannot be rebuilt from its stored spaces and parameters: {error}{hint}") \
                from None
        logger.info("agent %s restarted; %d session(s) ended", ref, ended)
        return ActionResult(True, f"agent {ref} restarted: model and counters deleted, {ended} session(s) ended"
                                  f"{'' if stopped else LINGERING}")
