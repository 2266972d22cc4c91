"""The aiohttp application: the client protocol of docs/protocol.md over a GraphManager, the admin API and
the dashboard (``admin.py``, ``dashboard.py``; their state keys are in ``state.py``).

Handlers parse and check a body once, at the edge, call one domain operation and serialise its result;
domain errors become JSON errors in `errors.error_middleware`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from pathlib import Path
from typing import AsyncIterator

import orjson
import yaml
from aiohttp import web

from shepherd.admin import AdminService
from shepherd.graph import Serving, Session
from shepherd.http import admin, dashboard, monitoring
from shepherd.http.errors import error_middleware
from shepherd.http.metrics import METRICS_SETTINGS, Metrics
from shepherd.http.limits import LoginThrottle, RateLimiter
from shepherd.http.protocol import STEP_FIELDS, parse_login, parse_object, parse_step, parse_vector_step, session_key
from shepherd.http.signins import SignInTable
from shepherd.http.state import (ADMIN, CONFIG, CREATED_ADMIN_TOKEN, CREATED_KEYS, DASHBOARD_FILES, GRAPH,
                                 LOCAL_CREDENTIAL, LOGIN_THROTTLE, METRICS, OPENAPI, RATE_LIMITER, SIGNINS, STORE,
                                 ServerConfig)
from shepherd.spaces import action_to_json, space_to_json
from shepherd.storage import DataFolderLock, Store, hash_key, new_secret

logger = logging.getLogger(__name__)

OPENAPI_FILE = Path(__file__).with_name("openapi.yaml")


def _json(data: object) -> web.Response:
    return web.Response(body=orjson.dumps(data), content_type="application/json")


def _count_request(app: web.Application, session: Session) -> None:
    limiter = app.get(RATE_LIMITER)
    if limiter is not None:  # environment steps: a vector session's request is one per env
        limiter.take(session.client_id, cost=session.n_envs or 1)


async def login_user(request: web.Request) -> web.Response:
    login = parse_login(await request.read())
    graph, throttle = request.app[GRAPH], request.app[LOGIN_THROTTLE]
    address = request.remote or "?"
    throttle.check(address)  # an address blocked by its failed attempts gets 429, its key untried
    limiter = request.app.get(RATE_LIMITER)
    if limiter is not None:  # before the session is opened: a refused login holds no slot
        limiter.take(hash_key(login.apikey))
    try:
        await graph.prepare_client(login.apikey, login.client)  # a new client's learner, built off the loop
        session = graph.login(login.apikey, login.evaluate_only, login.n_envs, login.client)
    except PermissionError:
        await asyncio.sleep(throttle.failed(address))  # slows down guessing, never blocks the loop
        raise
    reply = {"ok": True, "session_key": session.key, "agent": session.runtime.record.name,
             "observation_space": space_to_json(session.observation_space),
             "action_space": space_to_json(session.action_space)}
    if session.n_envs is not None:
        reply["n_envs"] = session.n_envs
    if session.runtime.client is not None:
        reply["client"] = session.runtime.client
    return _json(reply)


async def env_step(request: web.Request) -> web.Response:
    data = parse_object(await request.read(), STEP_FIELDS)
    graph = request.app[GRAPH]
    session = graph.session(session_key(data))
    _count_request(request.app, session)
    n_envs = session.n_envs
    step = (parse_step(data, session.observation_space, session.mask_space) if n_envs is None else
            parse_vector_step(data, session.observation_space, n_envs, session.mask_space))
    if step is None:
        graph.logout(session.key)
        return _json({"ok": True})
    acted = await graph.step(session, step)
    space = session.action_space
    if n_envs is not None:
        return _json({"actions": [action_to_json(space, action) for action in acted.action],
                      "policy_version": acted.policy_version})
    if acted.action is None:
        return _json({"action": None})
    return _json({"action": action_to_json(space, acted.action), "policy_version": acted.policy_version})


async def logout(request: web.Request) -> web.Response:
    data = parse_object(await request.read(), {"session_key"})
    request.app[GRAPH].logout(session_key(data))
    return _json({"ok": True})


async def openapi(request: web.Request) -> web.Response:
    return web.Response(body=request.app[OPENAPI], content_type="application/json")


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
    created: str | None = await asyncio.to_thread(service.ensure_admin_token)
    app[CREATED_ADMIN_TOKEN] = created or ""
    app[LOCAL_CREDENTIAL] = credential
    app[ADMIN] = service
    app[SIGNINS] = SignInTable()
    yield


async def _graph_context(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG]
    store = await asyncio.to_thread(Store, config.data)
    graph = config.graph_manager
    serving = Serving(deliver=asyncio.get_running_loop().call_soon_threadsafe,
                      act_timeout_seconds=config.act_timeout_seconds,
                      max_sessions_per_agent=config.max_sessions_per_agent,
                      max_envs_per_session=config.max_envs_per_session)
    try:
        app[CREATED_KEYS] = await asyncio.to_thread(graph.create_graph, store, serving, config.only_preset)
    except BaseException:
        await asyncio.to_thread(graph.abort)
        await asyncio.to_thread(store.close)
        raise
    app[STORE] = store
    app[GRAPH] = graph
    # torch, SB3 and the models are hundreds of thousands of long-lived objects: keep them out of the
    # garbage collector's full passes, which would otherwise pause every request now and then
    gc.freeze()
    sweeper = asyncio.create_task(_sweep_sessions(app))
    yield
    sweeper.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await sweeper
    graph.end_sessions()
    await asyncio.to_thread(graph.close)
    await asyncio.to_thread(store.close)


async def _drain(app: web.Application) -> None:
    """Shutdown has begun (no new connections): answer every step a learner holds back, so that the
    requests still open are answered before the graph is checkpointed and closed."""
    graph = app.get(GRAPH)
    if graph is not None:
        graph.drain()


async def _sweep_sessions(app: web.Application) -> None:
    config = app[CONFIG]
    while True:
        await asyncio.sleep(config.sweep_seconds)
        expired = app[GRAPH].expire_sessions(config.session_idle_seconds)
        if expired:
            logger.info("%d idle session(s) expired", expired)


async def _nosniff(request: web.Request, response: web.StreamResponse) -> None:
    """Every reply says what it is: browsers must not guess another type (a JSON error as HTML, say)."""
    response.headers["X-Content-Type-Options"] = "nosniff"


def create_app(config: ServerConfig) -> web.Application:
    """Build the application; the graph is created on startup and checkpointed on cleanup."""
    if config.metrics not in METRICS_SETTINGS:
        raise ValueError(f"metrics must be one of {', '.join(METRICS_SETTINGS)}, not {config.metrics!r}")
    app = web.Application(client_max_size=config.max_body_bytes,
                          middlewares=[error_middleware])
    app[CONFIG] = config
    app[METRICS] = Metrics(lambda: app.get(GRAPH))
    app[LOGIN_THROTTLE] = LoginThrottle()
    app[OPENAPI] = orjson.dumps(yaml.safe_load(OPENAPI_FILE.read_text()))
    if config.requests_per_second_per_key:
        app[RATE_LIMITER] = RateLimiter(config.requests_per_second_per_key, config.burst_per_key)
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
        web.get(admin.AGENT + "/metrics", admin.agent_metrics),
        web.get(admin.AGENT + "/model.zip", admin.model_zip),
        web.get(admin.AGENT + "/export", admin.export_agent),
        web.post(admin.AGENT + "/delete-model", admin.delete_model),
        web.post(admin.AGENT + "/delete-returns", admin.delete_returns),
        web.post(admin.AGENT + "/restart", admin.restart_agent),
        web.post(admin.AGENT + "/delete", admin.delete_agent),
        web.post(admin.AGENT + "/parameters", admin.set_parameters),
        web.post(admin.USER + "/delete", admin.delete_user),
        web.post(admin.AGENT + "/keys", admin.add_key),
        web.get(admin.API + "/keys", admin.list_keys),
        web.post(admin.KEY + "/revoke", admin.revoke_key),
        web.get("/shepherd/openapi.json", openapi),
        # monitoring
        web.get(monitoring.METRICS_PATH, monitoring.metrics),
        web.get(monitoring.HEALTH_PATH, monitoring.health),
    ])
    app.on_response_prepare.extend([_nosniff, monitoring.count_request])
    app.cleanup_ctx.extend([_folder_lock_context, _graph_context, _admin_context])
    app.on_shutdown.append(_drain)
    return app
