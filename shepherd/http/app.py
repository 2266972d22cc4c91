"""The aiohttp application: the client protocol of DESIGN.md over a GraphManager, the admin API and the
dashboard (``admin.py``, ``dashboard.py``; their state keys are in ``state.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator

import orjson
from aiohttp import web

from shepherd.admin import AdminService
from shepherd.graph import Conflict, GraphManager
from shepherd.http import admin, dashboard
from shepherd.http.errors import Overloaded, error_middleware
from shepherd.http.protocol import STEP_FIELDS, parse_login, parse_object, parse_step, session_key
from shepherd.http.signins import SignInTable
from shepherd.http.state import ADMIN, CREATED_ADMIN_TOKEN, DASHBOARD_FILES, LOCAL_CREDENTIAL, SIGNINS
from shepherd.spaces import action_to_json, space_to_json
from shepherd.storage import DataFolderLock, Store, new_secret

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerConfig:
    """Everything `create_app` needs. Times are in seconds."""

    graph_manager: GraphManager
    data: Path
    max_body_bytes: int = 1 << 20
    session_idle_seconds: float = 600.0
    act_timeout_seconds: float = 60.0
    sweep_seconds: float = 5.0


CONFIG = web.AppKey("config", ServerConfig)
GRAPH = web.AppKey("graph", GraphManager)
STORE = web.AppKey("store", Store)
CREATED_KEYS = web.AppKey("created_keys", dict)


def _json(data: object) -> web.Response:
    return web.Response(body=orjson.dumps(data), content_type="application/json")


async def login_user(request: web.Request) -> web.Response:
    login = parse_login(await request.read())
    session = request.app[GRAPH].login(login.apikey, login.evaluate_only)
    learner = session.runtime.learner
    return _json({"ok": True, "session_key": session.key, "agent": session.runtime.record.name,
                  "observation_space": space_to_json(learner.observation_space),
                  "action_space": space_to_json(learner.action_space)})


async def env_step(request: web.Request) -> web.Response:
    data = parse_object(await request.read(), STEP_FIELDS)
    graph = request.app[GRAPH]
    session = graph.session(session_key(data))
    learner = session.runtime.learner
    step = parse_step(data, learner.observation_space)
    if step.obs is None:
        graph.logout(session.key)
        return _json({"ok": True})
    if session.busy:
        raise Conflict("a step of this session is still waiting for its action; send the next one after it")
    session.busy = True
    try:
        future = session.level.step(step.obs, step.reward, step.done, step.truncated)
        if future is None:
            return _json({"action": None})
        timeout = request.app[CONFIG].act_timeout_seconds
        try:
            action = await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except asyncio.TimeoutError:
            raise Overloaded(f"the agent did not answer within {timeout:g} s", retry_after=1) from None
        return _json({"action": action_to_json(learner.action_space, action)})
    finally:
        session.busy = False


async def logout(request: web.Request) -> web.Response:
    data = parse_object(await request.read(), {"session_key"})
    request.app[GRAPH].logout(session_key(data))
    return _json({"ok": True})


async def _folder_lock_context(app: web.Application) -> AsyncIterator[None]:
    """Hold the data folder's lock while serving: no other server or admin command opens its store."""
    lock = DataFolderLock(app[CONFIG].data)
    await asyncio.to_thread(lock.acquire)
    yield
    lock.release()


async def _admin_context(app: web.Application) -> AsyncIterator[None]:
    """The admin service; the admin token is created on the first start (shown once, stored hashed)."""
    credential = new_secret()
    service = AdminService(app[STORE], app[GRAPH], local_credential=credential)
    app[CREATED_ADMIN_TOKEN] = await asyncio.to_thread(service.ensure_admin_token) or ""
    app[LOCAL_CREDENTIAL] = credential
    app[ADMIN] = service
    app[SIGNINS] = SignInTable()
    yield


async def _graph_context(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG]
    store = await asyncio.to_thread(Store, config.data)
    graph = config.graph_manager
    try:
        app[CREATED_KEYS] = await asyncio.to_thread(graph.create_graph, store)
    except BaseException:
        await asyncio.to_thread(store.close)
        raise
    app[STORE] = store
    app[GRAPH] = graph
    sweeper = asyncio.create_task(_sweep_sessions(app))
    yield
    sweeper.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await sweeper
    graph.end_sessions()
    await asyncio.to_thread(graph.close)
    await asyncio.to_thread(store.close)


async def _sweep_sessions(app: web.Application) -> None:
    config = app[CONFIG]
    while True:
        await asyncio.sleep(config.sweep_seconds)
        expired = app[GRAPH].expire_sessions(config.session_idle_seconds)
        if expired:
            logger.info("%d idle session(s) expired", expired)


def create_app(config: ServerConfig) -> web.Application:
    """Build the application; the graph is created on startup and checkpointed on cleanup."""
    app = web.Application(client_max_size=config.max_body_bytes, middlewares=[error_middleware])
    app[CONFIG] = config
    app[DASHBOARD_FILES] = dashboard.load_files()
    app.router.add_routes([
        web.post("/shepherd/login_user/", login_user),
        web.post("/shepherd/env/", env_step),
        web.post("/shepherd/logout/", logout),
        # the dashboard
        web.get(dashboard.PAGE, dashboard.page),
        web.get(dashboard.PAGE.rstrip("/"), dashboard.to_page),
        web.get(dashboard.STATIC, dashboard.static_file),
        web.post(dashboard.SIGNIN, dashboard.signin),
        web.get(dashboard.SIGNIN, dashboard.signin_state),
        web.post(dashboard.SIGNOUT, dashboard.signout),
        # the admin API
        web.get(admin.API + "/whoami", admin.whoami),
        web.get(admin.API + "/users", admin.list_users),
        web.post(admin.API + "/users", admin.add_user),
        web.get(admin.API + "/algorithms", admin.list_algorithms),
        web.post(admin.API + "/admin-token", admin.reset_admin_token),
        web.get(admin.API + "/agents", admin.list_agents),
        web.post(admin.API + "/agents", admin.add_agent),
        web.get(admin.AGENT, admin.show_agent),
        web.get(admin.AGENT + "/returns", admin.agent_returns),
        web.get(admin.AGENT + "/returns.csv", admin.returns_csv),
        web.get(admin.AGENT + "/model.zip", admin.model_zip),
        web.post(admin.AGENT + "/delete-model", admin.delete_model),
        web.post(admin.AGENT + "/delete-returns", admin.delete_returns),
        web.post(admin.AGENT + "/restart", admin.restart_agent),
        web.post(admin.AGENT + "/keys", admin.add_key),
        web.get(admin.API + "/keys", admin.list_keys),
        web.post(admin.KEY + "/revoke", admin.revoke_key),
    ])
    app.cleanup_ctx.extend([_folder_lock_context, _graph_context, _admin_context])
    return app
