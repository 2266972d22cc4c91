"""Monitoring routes: ``GET /metrics`` (Prometheus' text format) and ``GET /shepherd/health`` (liveness and
readiness), and the hook that counts answers by route and status.

Who may read ``/metrics`` is ``ServerConfig.metrics`` (``run.py --metrics``): ``off`` answers 404;
``local`` (the default) answers a loopback peer whose request came through no proxy, or anyone with the
admin token (``Authorization: Bearer``; 401 without a credential, 403 with an agent's key); ``open``
answers anyone. The health check answers anyone: its status code and ``status`` are for process managers
and load balancers; which agents failed and why is told only to whoever may read ``/metrics`` (and to
loopback peers when metrics are off). The data folder's write probe runs at most once per
`PROBE_SECONDS`, whoever asks and however often (`StoreProbe`). The contract is in docs/admin.md ("Monitoring").
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from shepherd.admin import Forbidden
from shepherd.graph import Unauthorized
from shepherd.http import admin
from shepherd.http.signins import COOKIE
from shepherd.http.proxies import VIA_PROXY
from shepherd.http.state import CONFIG, GRAPH, HEALTH_PROBE, METRICS, STORE
from shepherd.storage import NotFound

METRICS_PATH = "/metrics"
HEALTH_PATH = "/shepherd/health"
#: headers a reverse proxy adds: a request carrying one did not come from this machine's own client
_FORWARDED = ("Forwarded", "X-Forwarded-For", "X-Real-IP")


async def count_request(request: web.Request, response: web.StreamResponse) -> None:
    """Count every answer by method, route pattern (``unmatched`` for no route) and status, as it is
    sent (``on_response_prepare``: no middleware layer on the step path; it sees the statuses that
    `errors.error_middleware` gave). A request whose client went away before its answer is not counted."""
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "unmatched"
    request.app[METRICS].count_request(request.method, route, response.status)


def local_peer(request: web.Request) -> bool:
    """The request came from this machine (a loopback address) and through no proxy; or, through a trusted
    proxy (``--trusted-proxy``), from a client on a loopback address as its ``X-Forwarded-For`` says (a
    trusted proxy's request without one is never local)."""
    via_proxy = request.get(VIA_PROXY)
    if via_proxy is False:
        return False
    if via_proxy is None and any(name in request.headers for name in _FORWARDED):
        return False
    try:
        address = ipaddress.ip_address(request.remote or "")
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


async def metrics(request: web.Request) -> web.Response:
    setting = request.app[CONFIG].metrics
    if setting == "off":
        raise web.HTTPNotFound()
    if setting == "local" and not local_peer(request):
        if "Authorization" not in request.headers and COOKIE not in request.cookies:
            raise Unauthorized("metrics are answered to this machine (loopback), or with the admin token: send "
                               "'Authorization: Bearer <admin token>'")
        if not admin.principal(request).admin:
            raise Forbidden("metrics need the admin token, not an agent's API key")
    body, content_type = request.app[METRICS].exposition(request.headers.get("Accept"))
    return web.Response(body=body, headers={"Content-Type": content_type, "Cache-Control": "no-store"})


def _detailed(request: web.Request) -> bool:
    """Whether the health reply may name the agents that failed, and why."""
    return request.app[CONFIG].metrics == "open" or local_peer(request)


def probe_store(folder: Path) -> str:
    """``writable``, or why the data folder cannot take a write (a file is created and removed in it; a
    leftover is removed as a stale temporary when a store next opens the folder)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".health.", suffix=".tmp", dir=folder)
        try:
            os.write(fd, b"ok")
        finally:
            os.close(fd)
            os.unlink(name)
    except OSError as error:
        return f"not writable: {error.strerror or error}"
    return "writable"


#: how long a health check's store probe is reused: the data folder takes at most one probe write per period
PROBE_SECONDS = 5.0


class StoreProbe:
    """`probe_store`'s answer, reused for `PROBE_SECONDS`: unauthenticated health checks, however many, write
    to the data folder at most once per period, and callers arriving while a probe runs share it."""

    def __init__(self, period: float = PROBE_SECONDS) -> None:
        self.period = period
        self._state: str | None = None
        self._at = 0.0
        self._running: asyncio.Future[str] | None = None

    async def state(self, folder: Path) -> str:
        """``writable``, or why ``folder`` is not (`probe_store`), at most `period` seconds old."""
        if self._state is not None and time.monotonic() - self._at < self.period:
            return self._state
        if self._running is None:
            self._running = asyncio.ensure_future(self._probe(folder))
        return await asyncio.shield(self._running)

    async def _probe(self, folder: Path) -> str:
        try:
            self._state = await asyncio.to_thread(probe_store, folder)
            self._at = time.monotonic()
            return self._state
        finally:
            self._running = None


#: a learner inside one training update for this long makes health ``degraded`` (its clients wait meanwhile)
LONG_UPDATE_SECONDS = 30.0


def _label(agent: str, client: str | None) -> str:
    """``owner/name``, with ``/client`` for an advised agent's client."""
    return agent if client is None else f"{agent}/{client}"


async def health(request: web.Request) -> web.Response:
    graph, store = request.app.get(GRAPH), request.app.get(STORE)
    if graph is None or store is None:
        return _health_reply(503, {"status": "unavailable", "store": "not open",
                                   "agents": {"serving": 0, "failed": 0, "restoring": 0}, "checkpoints": {"failing": 0}})
    failures: dict[str, str] = {}
    unsaved: dict[str, str] = {}  # learners that serve but whose checkpoints fail
    restoring: list[str] = []  # learners whose process is being created again (a Ray actor, a Ray node)
    long_updates: dict[str, str] = {}  # serving learners inside one update for LONG_UPDATE_SECONDS or more
    serving = 0
    labels = request.app[METRICS].labels
    for runtime in graph.every_runtime():  # each pooled agent's learner, and each client's of an advised one
        learner = runtime.learner
        reason = learner.failure or (None if learner.alive else "its learner's thread stopped")
        label = _label(labels(graph, runtime.record.owner_id, runtime.record.name), runtime.client)
        if reason is None and not learner.available:
            restoring.append(label)
        elif reason is None:
            serving += 1
            trouble = runtime.checkpoints.trouble()
            if trouble is not None:
                unsaved[label] = trouble
            since = getattr(learner.algorithm, "updating_since", None)  # an SB3 learner's (a Ray actor's: unknown)
            if since is not None and time.monotonic() - since >= LONG_UPDATE_SECONDS:
                long_updates[label] = f"in one update for {time.monotonic() - since:.0f} s"
        else:
            failures[label] = reason
    for record, client, reason in graph.served.client_failures():
        failures[_label(labels(graph, record.owner_id, record.name), client)] = reason
    for agent_id, reason in list(graph.served.failures.items()):
        try:
            record = store.agent(agent_id)
        except NotFound:
            continue
        failures[labels(graph, record.owner_id, record.name)] = reason
    state = await request.app[HEALTH_PROBE].state(store.folder)
    troubled = bool(failures or unsaved or restoring or long_updates)
    status = "unavailable" if state != "writable" else "degraded" if troubled else "ok"
    reply: dict[str, Any] = {"status": status, "store": state,
                             "agents": {"serving": serving, "failed": len(failures), "restoring": len(restoring),
                                        "long_updates": len(long_updates)},
                             "checkpoints": {"failing": len(unsaved)}}
    if _detailed(request):
        reply["failures"] = failures
        reply["checkpoint_failures"] = unsaved
        reply["restoring"] = sorted(restoring)
        reply["long_updates"] = long_updates
    return _health_reply(503 if status == "unavailable" else 200, reply)


def _health_reply(status: int, data: dict[str, Any]) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json",
                        headers={"Cache-Control": "no-store"})
