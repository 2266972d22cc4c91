"""The admin operations through a running server's admin API, for commands run while a server holds the
data folder. Same methods and records as `Operations`; errors come back as the same domain exceptions."""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
from typing import Any
from urllib.parse import quote, urlsplit

from shepherd.admin.errors import Forbidden, Invalid, Unavailable
from shepherd.admin.records import (ActionResult, AgentView, CreatedEnvironmentKey, CreatedKey, EnvironmentKeyView,
                                    KeyView, NewAgent, UserView)
from shepherd.admin.names import match_agent
from shepherd.graph import Conflict, Unauthorized
from shepherd.storage import AlreadyExists, EpisodeReturn, NotFound, ReturnsPage
from shepherd.storage.metrics import MetricRows

logger = logging.getLogger(__name__)

API = "/shepherd/admin/api"

_ERRORS: dict[int, type[Exception]] = {400: Invalid, 401: Unauthorized, 403: Forbidden, 404: NotFound,
                                       409: AlreadyExists}


class RemoteOperations:
    """Admin operations sent to ``url`` with ``token`` as a Bearer credential (one connection per call)."""

    def __init__(self, url: str, token: str, timeout: float = 120.0) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise Unavailable(f"cannot reach the server at {url!r}")
        self.url = url
        self._host = parts.hostname
        self._port = parts.port or 80
        self._token = token
        self._timeout = timeout

    def _request(self, method: str, path: str, body: Any = None) -> bytes:
        connection = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body, allow_nan=False).encode()
            headers["Content-Type"] = "application/json"
        try:
            connection.request(method, API + path, payload, headers)
            response = connection.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as error:
            raise Unavailable(f"the server at {self.url} did not answer ({error})") from None
        finally:
            connection.close()
        if response.status >= 400:
            try:
                message = json.loads(data)["error"]
            except (ValueError, KeyError, TypeError):
                message = f"HTTP {response.status}"
            if response.status == 409 and "exists" not in message:
                raise Conflict(message)
            raise _ERRORS.get(response.status, Unavailable)(message)
        return data

    async def _json(self, method: str, path: str, body: Any = None) -> Any:
        return json.loads(await asyncio.to_thread(self._request, method, path, body))

    # -- the same surface as Operations ---------------------------------------------------------
    async def whoami(self) -> dict[str, Any]:
        return await self._json("GET", "/whoami")

    async def users(self) -> list[UserView]:
        return [UserView.from_json(item) for item in await self._json("GET", "/users")]

    async def add_user(self, name: str) -> UserView:
        return UserView.from_json(await self._json("POST", "/users", {"name": name}))

    async def agents(self) -> list[AgentView]:
        return [AgentView.from_json(item) for item in await self._json("GET", "/agents")]

    async def agent(self, agent_id: int) -> AgentView:
        return AgentView.from_json(await self._json("GET", f"/agents/{agent_id}"))

    async def resolve(self, ref: str) -> int:
        return match_agent(await self.agents(), ref).id

    async def add_agent(self, new: NewAgent) -> AgentView:
        return AgentView.from_json(await self._json("POST", "/agents", new.to_json()))

    async def keys(self, agent_id: int | None = None) -> list[KeyView]:
        path = "/keys" if agent_id is None else f"/keys?agent={agent_id}"
        return [KeyView.from_json(item) for item in await self._json("GET", path)]

    async def add_key(self, agent_id: int, label: str = "") -> CreatedKey:
        return CreatedKey.from_json(await self._json("POST", f"/agents/{agent_id}/keys", {"label": label}))

    async def environments(self) -> list[dict[str, Any]]:
        return await self._json("GET", "/environments")

    async def add_environment_key(self, ref: str, label: str = "") -> CreatedEnvironmentKey:
        return CreatedEnvironmentKey.from_json(await self._json("POST", "/environments/keys",
                                                                {"environment": ref, "label": label}))

    async def environment_keys(self, ref: str | None = None) -> list[EnvironmentKeyView]:
        path = "/environments/keys" if ref is None else f"/environments/keys?environment={quote(ref, safe='')}"
        return [EnvironmentKeyView.from_json(item) for item in await self._json("GET", path)]

    async def revoke_environment_key(self, key_id: int) -> EnvironmentKeyView:
        return EnvironmentKeyView.from_json(await self._json("POST", f"/environments/keys/{key_id}/revoke", {}))

    async def revoke_key(self, key_id: int) -> KeyView:
        return KeyView.from_json(await self._json("POST", f"/keys/{key_id}/revoke", {}))

    async def reset_admin_token(self) -> str:
        return (await self._json("POST", "/admin-token", {}))["token"]

    async def algorithms(self) -> list[dict[str, Any]]:
        return await self._json("GET", "/algorithms")

    async def returns(self, agent_id: int, offset: int = 0, first: float | None = None,
                      client: str | None = None) -> ReturnsPage:
        query = f"?offset={int(offset)}" + ("" if first is None else f"&first={float(first)!r}")
        query += "" if client is None else f"&client={quote(client)}"
        data = await self._json("GET", f"/agents/{agent_id}/returns{query}")
        return ReturnsPage(data["total"], data["offset"], data["reset"],
                           [EpisodeReturn(**item) for item in data["returns"]])

    async def metrics(self, agent_id: int, rows: int, columns: list[str] | None = None) -> MetricRows:
        query = f"?rows={int(rows)}" + (f"&columns={quote(','.join(columns))}" if columns else "")
        data = await self._json("GET", f"/agents/{agent_id}/metrics{query}")
        return MetricRows(data["columns"], data["rows"])

    async def export_model(self, agent_id: int, client: str | None = None) -> bytes:
        if client is not None:
            return await self.export_policy(agent_id, "sb3", client)
        return await asyncio.to_thread(self._request, "GET", f"/agents/{quote(str(agent_id))}/model.zip")

    async def export_policy(self, agent_id: int, format: str, client: str | None = None) -> bytes:
        query = f"?format={quote(format)}" + ("" if client is None else f"&client={quote(client)}")
        return await asyncio.to_thread(self._request, "GET", f"/agents/{quote(str(agent_id))}/export{query}")

    async def delete_model(self, agent_id: int) -> ActionResult:
        return ActionResult.from_json(await self._json("POST", f"/agents/{agent_id}/delete-model", {}))

    async def delete_returns(self, agent_id: int) -> ActionResult:
        return ActionResult.from_json(await self._json("POST", f"/agents/{agent_id}/delete-returns", {}))

    async def restart(self, agent_id: int) -> ActionResult:
        return ActionResult.from_json(await self._json("POST", f"/agents/{agent_id}/restart", {}))

    async def delete_agent(self, agent_id: int) -> ActionResult:
        return ActionResult.from_json(await self._json("POST", f"/agents/{agent_id}/delete", {}))

    async def find_user(self, ref: str) -> int:
        for user in await self.users():
            if ref.strip() in (user.name, str(user.id)):
                return user.id
        raise NotFound(f"no user {ref!r}")

    async def delete_user(self, user_id: int, with_agents: bool = False) -> ActionResult:
        return ActionResult.from_json(await self._json("POST", f"/users/{user_id}/delete",
                                                       {"with_agents": with_agents}))

    async def set_parameters(self, agent_id: int, values: dict[str, Any]) -> ActionResult:
        return ActionResult.from_json(await self._json("POST", f"/agents/{agent_id}/parameters",
                                                       {"parameters": values}))

    async def set_lesson(self, agent_id: int, name: str) -> ActionResult:
        return ActionResult.from_json(await self._json("POST", f"/agents/{agent_id}/lesson", {"lesson": name}))
