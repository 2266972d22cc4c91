"""The application's configuration and state, as ``web.AppKey``s declared in this one place (set up by
`create_app` and its cleanup contexts)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from shepherd.admin import AdminService
from shepherd.agents.bounds import DEFAULT_BOUNDS, ParameterBounds
from shepherd.graph import GraphManager
from shepherd.graph.agent import MAX_CLIENTS
from shepherd.graph.start_from import StartingCheckpoints
from shepherd.http.limits import LoginThrottle, RateLimiter, ReadSlots
from shepherd.http.metrics import Metrics
from shepherd.http.signins import SignInTable
from shepherd.storage import Store
from shepherd.wire.steps import DEFAULT_MAX_REWARD

if TYPE_CHECKING:
    from shepherd.http.monitoring import StoreProbe


@dataclass(frozen=True)
class ServerConfig:
    """Everything `create_app` needs. Times are in seconds; None switches a limit off."""

    graph_manager: GraphManager
    data: Path
    max_body_bytes: int = 1 << 20
    session_idle_seconds: float = 600.0
    act_timeout_seconds: float = 30.0
    sweep_seconds: float = 5.0
    max_sessions_per_agent: int | None = 1024
    max_envs_per_session: int = 1024  # the most envs a vector session may drive
    max_clients_per_agent: int | None = MAX_CLIENTS  # the most client names an advised agent takes (one learner each)
    max_reward: float = DEFAULT_MAX_REWARD  # the largest reward magnitude a step or upload may carry
    bounds: ParameterBounds = DEFAULT_BOUNDS  # what parameter values are held to (--parameter-bound)
    # environment steps (a request: one; a vector step: one per env) per second per API key
    requests_per_second_per_key: float | None = 20000.0
    burst_per_key: float | None = None  # default: one second's worth
    # connections (shepherd/http/server.py): a new connection must send its first request's headers within
    # header_timeout_seconds, a request its body within body_timeout_seconds (else 408), and a connection
    # waiting for its next request is closed after idle_timeout_seconds; more than max_connections open
    # at once get 503 and are closed (None: derived from the open-file limit, see `connection_limit`)
    header_timeout_seconds: float = 10.0
    body_timeout_seconds: float = 30.0
    idle_timeout_seconds: float = 75.0
    max_connections: int | None = None
    # connections one peer address may hold open at once (more get 429 and are closed): None, half of
    # max_connections; 0, no cap. Trusted proxies (below) have none; nor has a head behind front ends (its peers
    # are the front ends, which apply it)
    max_connections_per_address: int | None = None
    secure_cookies: bool = False  # mark the dashboard's sign-in cookie Secure (behind a TLS proxy)
    only_preset: bool = False  # serve the preset's agents alone, not the store's others
    # who may read GET /metrics: "off" (404), "local" (loopback peers, or the admin token), "open" (anyone)
    metrics: str = "local"
    # with front ends (run.py --front-ends, shepherd/front/): this run's random token, which their batch
    # endpoint POST /internal/steps requires and with which they vouch for their clients' addresses; None
    # (the default): no front ends, no such endpoint
    front_end_token: str | None = None
    # with front ends: whether they answer evaluate-mode steps from snapshots of the greedy policy (False: every
    # step comes here, as a training step does)
    front_end_snapshots: bool = True
    # run.py --evaluate: every login answered in evaluate mode ("mode": "evaluate" in its reply), nothing learned,
    # no checkpoint written at the stop
    evaluate_only: bool = False
    # run.py -crd / -crf: the checkpoints that the preset's agents without a model start from (checked already)
    start_from: StartingCheckpoints | None = None
    # reverse proxies (addresses or networks) whose X-Forwarded-For gives the client's address (run.py
    # --trusted-proxy, shepherd/http/proxies.py); empty: the header is never believed
    trusted_proxies: tuple[str, ...] = ()
    # whole learning curves read at once per credential (the admin's, each agent's keys'): a CSV download, or a JSON
    # read of over 1 MB of the log, each streamed off disk; more get 429 with Retry-After (run.py --max-curve-reads);
    # a read whose client takes nothing for curve_read_stall_seconds loses its slot and its connection (None: never)
    max_curve_reads: int = 2
    curve_read_stall_seconds: float | None = 10.0


#: the configuration the app was created with
CONFIG = web.AppKey("config", ServerConfig)
#: the served graph: agents, their learners, the client sessions
GRAPH = web.AppKey("graph", GraphManager)
#: the data folder's store (owned by the server while it runs)
STORE = web.AppKey("store", Store)
#: API keys created at this start, by agent name (shown once by the command line)
CREATED_KEYS = web.AppKey("created_keys", dict)
#: requests per second per API key (absent when switched off)
RATE_LIMITER = web.AppKey("rate_limiter", RateLimiter)
#: slows down failed logins per address
LOGIN_THROTTLE = web.AppKey("login_throttle", LoginThrottle)
#: the whole-curve reads under way (``max_curve_reads`` at most)
CURVE_READS = web.AppKey("curve_reads", ReadSlots)
#: the OpenAPI description, as JSON bytes
OPENAPI = web.AppKey("openapi", bytes)
#: the admin operations over the served store and graph
ADMIN = web.AppKey("admin", AdminService)
#: the dashboard's sign-ins (cookie id -> token hash and CSRF token)
SIGNINS = web.AppKey("signins", SignInTable)
#: the admin token created at this start ("" if the store had one): shown once by the command line
CREATED_ADMIN_TOKEN = web.AppKey("created_admin_token", str)
#: this run's local admin credential, published in the data folder for the admin commands
LOCAL_CREDENTIAL = web.AppKey("local_credential", str)
#: the dashboard's files (name -> bytes), read once when the app is created
DASHBOARD_FILES = web.AppKey("dashboard_files", dict)
#: the health check's probe of the data folder, reused for a few seconds
HEALTH_PROBE: web.AppKey[StoreProbe] = web.AppKey("health_probe")
#: the app's Prometheus registry and request counts (``GET /metrics``)
METRICS = web.AppKey("metrics", Metrics)
#: the client-acting sessions whose login asked for the policy file in their upload replies ("policy_in_reply")
POLICY_IN_REPLY = web.AppKey("policy_in_reply", weakref.WeakSet)
