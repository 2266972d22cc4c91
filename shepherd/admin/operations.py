"""The admin operations one caller may perform (see `AdminService.acting_as`): users, agents, API keys,
the admin token, the curve, training metrics, and the seed's special actions (`shepherd.admin.actions`:
export the model, or the greedy policy as ONNX, delete it, delete the curve, restart the agent).

The admin may do everything; the holder of an agent's API key sees and acts on that agent only, and any
other agent is "not found", exactly as one that does not exist, so no name leaks. The special actions
are the graph's lifecycle verbs (`shepherd.graph.served`); this module decides who may call them and
says what they did.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

from shepherd.admin.errors import Invalid
from shepherd.admin.names import check_name, match_agent
from shepherd.admin.records import (ActionResult, AgentView, CreatedEnvironmentKey, CreatedKey, EnvironmentKeyView,
                                    KeyView, NewAgent, UserView)
from shepherd.definition import AgentDefinition
from shepherd.lessons import lessons_to_json
from shepherd.agents import ParameterError, check_agent, registry_records
from shepherd.admin.actions import SpecialActions
from shepherd.agents.bounds import ParameterBounds
from shepherd.wire.spaces import SpaceError
from shepherd.storage import AlreadyExists, EnvironmentRecord, EpisodeReturn, NotFound, ReturnsJson, ReturnsPage
from shepherd.storage.metrics import MetricRows, progress_path, read_progress

logger = logging.getLogger(__name__)


class Operations(SpecialActions):
    """The admin operations one principal may perform (with the special actions of `SpecialActions`). Each
    raises what `OperationsBase` says."""

    # -- who am I ------------------------------------------------------------------------------
    async def whoami(self) -> dict[str, Any]:
        info = self.principal.to_json()
        if self.principal.agent_id is not None:
            info["agent_ref"] = self._ref(self._record(self.principal.agent_id))
        return info

    # -- users ---------------------------------------------------------------------------------
    async def users(self) -> list[UserView]:
        self.require_admin("listing users")
        counts: dict[int, int] = {}
        for record in self.store.agents():
            counts[record.owner_id] = counts.get(record.owner_id, 0) + 1
        return [UserView(user.id, user.name, user.created, counts.get(user.id, 0)) for user in self.store.users()]

    async def add_user(self, name: str) -> UserView:
        self.require_admin("adding users")
        user = await asyncio.to_thread(self.store.add_user, check_name(name, "user"))
        return UserView(user.id, user.name, user.created, 0)

    async def delete_user(self, user_id: int, with_agents: bool = False) -> ActionResult:
        """Delete a user; one who owns agents only ``with_agents`` (which deletes them first, as
        `delete_agent` does).

        Raises:
            Invalid: the user owns agents and ``with_agents`` is false (the message names them).
        """
        self.require_admin("deleting users")
        user = self.store.user(user_id)
        owned = [record for record in self.store.agents() if record.owner_id == user_id]
        if owned and not with_agents:
            raise Invalid(f"user {user.name} owns {len(owned)} agent(s): "
                          f"{', '.join(self._ref(record) for record in owned)}; delete them first, or delete the "
                          "user with its agents (--with-agents)")
        for record in owned:
            await self.delete_agent(record.id)
        for digest in await asyncio.to_thread(self.store.delete_user, user_id):
            self.graph.served.end_key_sessions(digest)  # its environments' sessions end, as a revoked key's do
        logger.info("user %s deleted", user.name)
        agents = f" and its {len(owned)} agent(s)" if owned else ""
        return ActionResult(True, f"user {user.name} deleted{agents}")

    async def find_user(self, ref: str) -> int:
        """The id of the user that ``ref`` names (its id or its name).

        Raises:
            NotFound: no such user.
        """
        self.require_admin("finding users")
        for user in self.store.users():
            if ref.strip() in (user.name, str(user.id)):
                return user.id
        raise NotFound(f"no user {ref!r}")

    # -- agents --------------------------------------------------------------------------------
    async def agents(self) -> list[AgentView]:
        if self.principal.admin:
            records = self.store.agents()
        else:
            records = [self._record(self.principal.agent_id)]  # type: ignore[arg-type]
        return [self._view(record) for record in records]

    async def agent(self, agent_id: int) -> AgentView:
        return self._view(self._record(agent_id))

    async def resolve(self, ref: str) -> int:
        """The id of the agent that ``ref`` names (see `match_agent`)."""
        return match_agent(await self.agents(), ref).id

    async def add_agent(self, new: NewAgent) -> AgentView:
        """Create an agent after checking everything, up to building its learner; a server starts serving
        it at once."""
        self.require_admin("adding agents")
        definition = new.definition
        check_name(definition.name, "agent")
        owner = self.store.find_user(new.owner) if isinstance(new.owner, str) else None
        if owner is None:
            raise NotFound(f"no user named {new.owner!r}; add the user first")
        if self.store.find_agent(owner.id, definition.name) is not None:
            raise AlreadyExists(f"user {owner.name} has an agent named {definition.name!r} already")
        algorithm, values = _checked(definition, self.graph.bounds)
        record = await asyncio.to_thread(self.store.add_agent, owner.id, definition.name, algorithm,
                                         definition.observation_space, definition.action_space, values,
                                         definition.sharing.value, definition.filters.to_json(),
                                         lessons_to_json(definition.lessons))
        try:
            await self.graph.served.add(record, serve=self.service.serving)
        except Exception as error:  # noqa: BLE001 - whatever SB3 refuses is the input's fault; undo the add
            await asyncio.to_thread(self.store.remove_agent, record.id)
            raise Invalid(f"{algorithm} cannot be built with these spaces and parameters: {error}") from None
        if self.service.serving:
            logger.info("agent %s/%s added and served", owner.name, record.name)
        return self._view(record)

    # -- API keys ------------------------------------------------------------------------------
    async def keys(self, agent_id: int | None = None) -> list[KeyView]:
        self.require_admin("listing API keys")
        if agent_id is not None:
            self._record(agent_id)
        refs = {record.id: self._ref(record) for record in self.store.agents()}
        return [KeyView(key.id, key.agent_id, refs.get(key.agent_id, "?"), key.label, key.created, key.revoked)
                for key in self.store.api_keys(agent_id)]

    async def add_key(self, agent_id: int, label: str = "") -> CreatedKey:
        self.require_admin("adding API keys")
        record = self._record(agent_id)
        if not isinstance(label, str) or len(label) > 100:
            raise Invalid("a key's label is a string of at most 100 characters")
        key, stored = await asyncio.to_thread(self.store.add_api_key, record.id, label)
        return CreatedKey(key, stored.id, record.id, self._ref(record), label)

    async def environments(self) -> list[dict[str, Any]]:
        """The environments with roles: each one's owner/name, definition (roles, turns, teams, self_play), its
        players' ratings, best first, and each agent's rating over its steps (both null when its first role's
        agent is not served here and has no readable checkpoint)."""
        self.require_admin("listing environments")
        from shepherd.graph.environments import environment_ratings

        owners = {user.id: user.name for user in self.store.users()}
        return [{"environment": f"{owners.get(record.owner_id)}/{record.name}", **record.definition,
                 **(environment_ratings(record, self.graph.served) or {"ratings": None, "history": None})}
                for record in self.store.environments()]

    async def add_environment_key(self, ref: str, label: str = "") -> CreatedEnvironmentKey:
        """A key of the environment with roles ``ref`` names (``owner/name``, or a name only one environment has:
        docs/how-to/multi-agent.md)."""
        self.require_admin("adding API keys")
        if not isinstance(label, str) or len(label) > 100:
            raise Invalid("a key's label is a string of at most 100 characters")
        record = self._environment(ref)
        key, stored = await asyncio.to_thread(self.store.add_environment_key, record.id, label)
        return CreatedEnvironmentKey(key, self._environment_ref(record), label, stored.id)

    async def environment_keys(self, ref: str | None = None) -> list[EnvironmentKeyView]:
        """The keys of environments with roles (of the one ``ref`` names, if given), as `keys` lists agents'."""
        self.require_admin("listing API keys")
        environment_id = None if ref is None else self._environment(ref).id
        refs = {record.id: self._environment_ref(record) for record in self.store.environments()}
        return [EnvironmentKeyView(key.id, key.environment_id, refs.get(key.environment_id, "?"), key.label, key.created,
                                   key.revoked) for key in self.store.environment_keys(environment_id)]

    async def revoke_environment_key(self, key_id: int) -> EnvironmentKeyView:
        """Refuse an environment's key from now on and end the sessions it opened on a running server, as
        `revoke_key` does an agent's."""
        self.require_admin("revoking API keys")
        digest = await asyncio.to_thread(self.store.revoke_environment_key, key_id)
        self.graph.served.end_key_sessions(digest)
        key = self.store.environment_key(key_id)
        return EnvironmentKeyView(key.id, key.environment_id, self._environment_ref(self.store.environment(
            key.environment_id)), key.label, key.created, key.revoked)

    def _environment(self, ref: str) -> EnvironmentRecord:
        """The environment with roles ``ref`` names (``owner/name``, or a name only one environment has).

        Raises:
            NotFound: none (the message says neither an agent nor an environment: `keys add` tries both).
            Invalid: ``ref`` is not a string, or several environments have that name.
        """
        if not isinstance(ref, str):
            raise Invalid("'environment' is the environment's owner/name")
        found = [record for record in self.store.environments()
                 if ref.strip() in (self._environment_ref(record), record.name)]
        if not found:
            raise NotFound(f"no agent or environment {ref!r}")
        if len(found) > 1:
            raise Invalid(f"several environments are named {ref!r}; write owner/name")
        return found[0]

    def _environment_ref(self, record: EnvironmentRecord) -> str:
        owner = next((user.name for user in self.store.users() if user.id == record.owner_id), "?")
        return f"{owner}/{record.name}"

    async def revoke_key(self, key_id: int) -> KeyView:
        """Refuse the key from now on and end the sessions it opened on a running server."""
        self.require_admin("revoking API keys")
        digest = await asyncio.to_thread(self.store.revoke_api_key, key_id)
        self.graph.served.end_key_sessions(digest)
        key = self.store.api_key(key_id)
        return KeyView(key.id, key.agent_id, self._ref(self.store.agent(key.agent_id)), key.label, key.created,
                       key.revoked)

    async def reset_admin_token(self) -> str:
        """Replace the admin token; the old one stops working at once. Returns the new one (shown once)."""
        self.require_admin("replacing the admin token")
        return await asyncio.to_thread(self.service.new_admin_token)

    # -- algorithms ----------------------------------------------------------------------------
    async def algorithms(self) -> list[dict[str, Any]]:
        """The algorithms and their typed parameters (the store's tables, filled by the server at start)."""
        algorithms = self.store.algorithms()
        if algorithms:
            return [{**a, "parameters": self.store.parameters(a["name"])} for a in algorithms]
        algorithms, parameters = registry_records()  # no server has filled the tables yet
        return [{**a, "parameters": [p for p in parameters if p["algorithm"] == a["name"]]} for a in algorithms]

    # -- the curve -----------------------------------------------------------------------------
    # ``client`` picks one client's curve of an advised agent; without it, the agent's curve (every client's).
    async def returns(self, agent_id: int, offset: int = 0, first: float | None = None,
                      client: str | None = None) -> ReturnsPage:
        """The returns from ``offset`` on (see `ReturnLog.page`), read off the event loop; only the new ones
        are read and parsed, so polling a long curve costs what it has gained since."""
        client = self._client(self._record(agent_id), client)
        return await asyncio.to_thread(self.store.returns_page, agent_id, offset, first, client)

    async def returns_json(self, agent_id: int, offset: int = 0, first: float | None = None,
                           client: str | None = None) -> ReturnsJson:
        """`returns` with the records as JSON text, for a reply: a long curve makes no Python objects. Its
        ``pieces`` are read as they are iterated: each ``next`` off the event loop (``asyncio.to_thread``)."""
        client = self._client(self._record(agent_id), client)
        return await asyncio.to_thread(self.store.returns_json, agent_id, offset, first, client, True)

    async def returns_chunks(self, agent_id: int, client: str | None = None) -> Iterator[list[EpisodeReturn]]:
        """Every return, a piece at a time, for a download. Each ``next`` reads the file: call it off the
        event loop (``asyncio.to_thread``)."""
        client = self._client(self._record(agent_id), client)
        return self.store.returns_chunks(agent_id, client=client)

    # -- training metrics ----------------------------------------------------------------------
    async def metrics(self, agent_id: int, rows: int, columns: list[str] | None = None) -> MetricRows:
        """The last ``rows`` rows of the agent's training metrics (SB3's logger and Shepherd's values, see
        `shepherd.agents.metrics`), with only ``columns`` if given; none yet for an agent that has not
        learned. Read off the event loop, from the end of the file."""
        self._record(agent_id)
        return await asyncio.to_thread(read_progress, progress_path(self.store.agent_folder(agent_id)), rows,
                                       columns)


def _checked(definition: AgentDefinition, bounds: ParameterBounds) -> tuple[str, dict[str, Any]]:
    """The canonical algorithm name and the typed parameter values of a new agent.

    Raises:
        Invalid: an unknown algorithm, bad spaces, spaces it cannot handle, or bad parameters (of the wrong
            type, or outside ``bounds``).
    """
    try:
        info, values = check_agent(definition)
        bounds.check(info.name, values)
    except (ParameterError, SpaceError) as error:
        raise Invalid(str(error)) from None
    return info.name, values
