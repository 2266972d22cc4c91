"""The aiohttp application: the client protocol of docs/protocol.md over a GraphManager, the admin API and
the dashboard (``admin.py``, ``dashboard.py``; their state keys are in ``state.py``).

Handlers parse and check a body once, at the edge, call one domain operation and serialise its result;
domain errors become JSON errors in `errors.error_middleware`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import weakref
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable

import orjson
import yaml
from aiohttp import web

from shepherd.admin import AdminService
from shepherd.graph import Serving
from shepherd.http import admin, curves, dashboard, internal, monitoring
from shepherd.http.errors import error_middleware
from shepherd.http.metrics import METRICS_SETTINGS, Metrics
from shepherd.http.limits import LoginThrottle, RateLimiter, ReadSlots
from shepherd.http.operations import CLIENT_OPERATIONS, ClientOperation
from shepherd.http.proxies import parse_networks, proxy_middleware
from shepherd.http.signins import SignInTable
from shepherd.http.state import (ADMIN, CONFIG, CREATED_ADMIN_TOKEN, CREATED_KEYS, CURVE_READS, DASHBOARD_FILES, GRAPH,
                                 HEALTH_PROBE, LOCAL_CREDENTIAL, LOGIN_THROTTLE, METRICS, OPENAPI, POLICY_IN_REPLY,
                                 RATE_LIMITER,
                                 SIGNINS, STORE, ServerConfig)
from shepherd.storage import DataFolderLock, Store, new_secret
from shepherd.wire.tensors import HEADER as TENSORS_HEADER, json_length

logger = logging.getLogger(__name__)

OPENAPI_FILE = Path(__file__).with_name("openapi.yaml")


@functools.cache
def openapi_document() -> bytes:
    """The OpenAPI description as JSON, read once per process (libyaml's loader where PyYAML has it: the
    pure-Python one takes ~0.3 s for it)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return orjson.dumps(yaml.load(OPENAPI_FILE.read_text(), Loader=loader))  # noqa: S506 - a safe loader


def _client_route(operation: ClientOperation) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        length = json_length(request.headers.get(TENSORS_HEADER))  # binary tensors after the JSON
        return await operation(request.app, await request.read(), request.remote or "?", length)

    handler.__name__ = handler.__qualname__ = operation.__name__.removesuffix("_reply")
    return handler


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
                      max_envs_per_session=config.max_envs_per_session,
                      max_clients_per_agent=config.max_clients_per_agent,
                      evaluate_only=config.evaluate_only, start_from=config.start_from,
                      max_reward=config.max_reward, bounds=config.bounds)
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
    # with front ends, their middleware comes first: it vouches for the client addresses they pass on, and lets
    # the batch endpoint's bodies (many clients' bodies in one) past the per-request limit
    front_ends = [] if config.front_end_token is None else [internal.front_end_middleware(config)]
    # then, behind trusted reverse proxies, the client's address from X-Forwarded-For (the proxy's own is the
    # peer a front end passes on)
    proxies = [proxy_middleware(parse_networks(config.trusted_proxies))] if config.trusted_proxies else []
    app = web.Application(client_max_size=config.max_body_bytes,
                          middlewares=[*front_ends, *proxies, error_middleware])
    app[CONFIG] = config
    app[METRICS] = Metrics(lambda: app.get(GRAPH))
    app[LOGIN_THROTTLE] = LoginThrottle()
    app[CURVE_READS] = ReadSlots(config.max_curve_reads, config.curve_read_stall_seconds)
    app[HEALTH_PROBE] = monitoring.StoreProbe()
    app[OPENAPI] = openapi_document()
    if config.requests_per_second_per_key:
        app[RATE_LIMITER] = RateLimiter(config.requests_per_second_per_key, config.burst_per_key)
    app[DASHBOARD_FILES] = dashboard.load_files()
    app[POLICY_IN_REPLY] = weakref.WeakSet()
    app.router.add_routes([
        *(web.post(path, _client_route(operation)) for path, operation in CLIENT_OPERATIONS.values()),
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
        web.get(admin.AGENT + "/returns", curves.agent_returns),
        web.get(admin.AGENT + "/returns.csv", curves.returns_csv),
        web.get(admin.AGENT + "/metrics", admin.agent_metrics),
        web.get(admin.AGENT + "/model.zip", admin.model_zip),
        web.get(admin.AGENT + "/export", admin.export_agent),
        web.post(admin.AGENT + "/delete-model", admin.delete_model),
        web.post(admin.AGENT + "/delete-returns", admin.delete_returns),
        web.post(admin.AGENT + "/restart", admin.restart_agent),
        web.post(admin.AGENT + "/delete", admin.delete_agent),
        web.post(admin.AGENT + "/parameters", admin.set_parameters),
        web.post(admin.AGENT + "/lesson", admin.set_lesson),
        web.post(admin.USER + "/delete", admin.delete_user),
        web.post(admin.AGENT + "/keys", admin.add_key),
        web.get(admin.API + "/keys", admin.list_keys),
        web.post(admin.KEY + "/revoke", admin.revoke_key),
        web.get(admin.API + "/environments", admin.list_environments),
        web.post(admin.API + "/environments/keys", admin.add_environment_key),
        web.get(admin.API + "/environments/keys", admin.list_environment_keys),
        web.post(admin.ENVIRONMENT_KEY + "/revoke", admin.revoke_environment_key),
        web.get("/shepherd/openapi.json", openapi),
        # monitoring
        web.get(monitoring.METRICS_PATH, monitoring.metrics),
        web.get(monitoring.HEALTH_PATH, monitoring.health),
    ])
    if config.front_end_token is not None:
        app.router.add_post(internal.INTERNAL_PATH, internal.internal_steps)
        app.router.add_get(internal.SNAPSHOT_PATH, internal.internal_snapshot)
    app.on_response_prepare.extend([_nosniff, monitoring.count_request])
    app.cleanup_ctx.extend([_folder_lock_context, _graph_context, _admin_context])
    app.on_shutdown.append(_drain)
    return app
