"""The deploy server's aiohttp application: login, single and vector steps, logout (docs/protocol.md), every
action the exported policy's greedy one. It never learns and never writes a file.

Sessions are kept as the learning server keeps them (a session key each, ``seq`` retries answered with the
same reply, idle sessions expired), but a session holds no episode: a step is answered as soon as its
observation is checked, by one onnxruntime call on the event loop (a vector step's N observations in one).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable

import numpy as np
import orjson
from aiohttp import web

from shepherd.policies.onnx import Policy, PolicyError
from shepherd.wire.limits import LoginThrottle, TooManyRequests
from shepherd.wire.replies import http_error, json_error
from shepherd.wire.sessions import Conflict, TooManySessions, Unauthorized, is_retry
from shepherd.wire.spaces import SpaceError, check_action_mask, space_to_json
from shepherd.wire.tensors import HEADER as TENSORS_HEADER, json_length, plain
from shepherd.wire import (STEP_FIELDS, BadRequest, StepInput, VectorStepInput, parse_login, parse_object,
                           parse_step, parse_vector_step, session_key)

logger = logging.getLogger(__name__)


def new_key() -> str:
    """A new API key or session key: 256 random bits, URL-safe (as the learning server's)."""
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class DeployConfig:
    """What `create_app` needs. Times are in seconds."""

    policy: Policy
    api_key: str
    max_body_bytes: int = 1 << 20
    max_sessions: int = 1024
    max_envs_per_session: int = 1024
    session_idle_seconds: float = 600.0
    sweep_seconds: float = 5.0
    # every failed login waits this long, and an address's failures past the learning server's allowance
    # (`LoginThrottle`) block it for a delay that doubles: 429 with Retry-After, its key untried
    failed_login_delay_seconds: float = 0.25


@dataclass(eq=False)
class DeploySession:
    """One client's session: how many envs it drives (None: one), and its last step for ``seq`` retries."""

    key: str
    n_envs: int | None
    last_used: float = field(default_factory=time.monotonic)
    last_seq: int | None = None
    last_digest: str = ""  # the last step's digest (`shepherd.wire.Step.digest`): what a retry must repeat
    last_reply: dict[str, Any] | None = None


class Sessions:
    """The open sessions by session key, at most ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._sessions: dict[str, DeploySession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self, n_envs: int | None) -> DeploySession:
        if len(self._sessions) >= self.limit:
            raise TooManySessions(f"this server has its maximum of {self.limit} sessions; log out unused ones or "
                                  "retry later")
        session = DeploySession(new_key(), n_envs)
        self._sessions[session.key] = session
        return session

    def get(self, key: str) -> DeploySession:
        session = self._sessions.get(key)
        if session is None:
            raise Unauthorized("unknown or expired session_key; log in again")
        session.last_used = time.monotonic()
        return session

    def end(self, key: str) -> None:
        self._sessions.pop(self.get(key).key)

    def expire(self, idle_seconds: float) -> int:
        cutoff = time.monotonic() - idle_seconds
        idle = [key for key, session in self._sessions.items() if session.last_used < cutoff]
        for key in idle:
            del self._sessions[key]
        return len(idle)


class MaskRule:
    """The deploy server's rule for a step's action mask: `check_action_mask` against the policy's action
    space, and a refusal naming the policy's algorithm when it takes none (``mask_space`` None)."""

    def __init__(self, algorithm: str) -> None:
        self.algorithm = algorithm

    def __call__(self, value: Any, mask_space: Any, where: str) -> np.ndarray:
        if mask_space is None:
            raise SpaceError(f"this policy ({self.algorithm}) takes no 'action_mask'; only policies exported "
                             "from an algorithm that takes masks do")
        return check_action_mask(mask_space, value, where)


CONFIG = web.AppKey("deploy_config", DeployConfig)
SESSIONS = web.AppKey("deploy_sessions", Sessions)
MASK_RULE = web.AppKey("deploy_mask_rule", MaskRule)
LOGIN_THROTTLE = web.AppKey("deploy_login_throttle", LoginThrottle)


def _json(data: object) -> web.Response:
    return web.Response(body=orjson.dumps(data), content_type="application/json")


def _json_length(request: web.Request) -> int | None:
    """The request's Inference-Header-Content-Length: binary tensors follow its body's JSON (docs/protocol.md)."""
    return json_length(request.headers.get(TENSORS_HEADER))


async def login_user(request: web.Request) -> web.Response:
    login = parse_login(await request.read(), _json_length(request))
    config, throttle, address = request.app[CONFIG], request.app[LOGIN_THROTTLE], request.remote or "?"
    throttle.check(address)  # an address blocked by its failed attempts gets 429, its key untried
    if not hmac.compare_digest(login.apikey.encode(), config.api_key.encode()):
        await asyncio.sleep(max(config.failed_login_delay_seconds, throttle.failed(address)))
        raise Unauthorized("unknown or revoked API key")
    if login.acts_at_client:
        raise BadRequest("this deploy server answers steps (\"acting\": \"server\"); a client that acts itself runs "
                         "the exported policy file directly (docs/export.md)")
    if login.n_envs is not None and login.n_envs > config.max_envs_per_session:
        raise BadRequest(f"'n_envs' must be between 1 and {config.max_envs_per_session} (this server's "
                         f"--max-envs), not {login.n_envs}")
    session = request.app[SESSIONS].open(login.n_envs)
    policy = config.policy
    # every session is in evaluate mode, whatever the login asked: the reply says so
    reply: dict[str, Any] = {"ok": True, "session_key": session.key, "agent": policy.agent,
                             "observation_space": space_to_json(policy.observation_space),
                             "action_space": space_to_json(policy.action_space), "mode": "evaluate"}
    if session.n_envs is not None:
        reply["n_envs"] = session.n_envs
    if policy.takes_masks:
        reply["action_masks"] = True
    return _json(reply)


async def env_step(request: web.Request) -> web.Response:
    data = parse_object(await request.read(), STEP_FIELDS, _json_length(request))
    sessions, policy, mask_rule = request.app[SESSIONS], request.app[CONFIG].policy, request.app[MASK_RULE]
    session = sessions.get(session_key(data))
    mask_space = policy.action_space if policy.takes_masks else None
    step: StepInput | VectorStepInput | None
    if session.n_envs is None:
        step = parse_step(data, policy.observation_space, mask_space, mask_rule)
    else:
        step = parse_vector_step(data, policy.observation_space, session.n_envs, mask_space, mask_rule)
    if step is None:
        sessions.end(session.key)
        return _json({"ok": True})
    if is_retry(step.seq, session.last_seq, lambda: step.digest() == session.last_digest):
        return _json(session.last_reply)  # a retry: the same answer
    reply = _act(policy, step)
    if step.seq is not None:
        session.last_seq, session.last_digest, session.last_reply = step.seq, step.digest(), reply
    return _json(reply)


def _act(policy: Policy, step: StepInput | VectorStepInput) -> dict[str, Any]:
    """The reply to a checked step. Raises `BadRequest`: an observation makes the policy's action NaN."""
    try:
        if isinstance(step, VectorStepInput):
            return {"actions": policy.act_batch(step.envs.obs, step.envs.masks),
                    "policy_version": policy.policy_version}
        if step.done:
            return {"action": None}
        action = policy.act_batch([step.obs], None if step.mask is None else [step.mask])[0]
    except PolicyError as error:
        raise BadRequest(str(error).replace("observations[0]", "obs") if not isinstance(step, VectorStepInput)
                         else str(error).replace("observations[", "obs[")) from None
    return {"action": action, "policy_version": policy.policy_version}


async def logout(request: web.Request) -> web.Response:
    data = plain(parse_object(await request.read(), {"session_key"}, _json_length(request)))
    request.app[SESSIONS].end(session_key(data))
    return _json({"ok": True})


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Errors as the learning server words them: JSON, never a 200, never a traceback or a key."""
    try:
        length = request.content_length
        if length is not None and length > request.client_max_size:
            raise web.HTTPRequestEntityTooLarge(max_size=request.client_max_size, actual_size=length)
        return await handler(request)
    except web.HTTPException as error:
        if error.status < 400:
            raise
        return http_error(request, error)
    except BadRequest as error:
        return json_error(400, str(error))
    except Unauthorized as error:
        return json_error(401, str(error))
    except Conflict as error:
        return json_error(409, str(error))
    except TooManySessions as error:
        return json_error(429, str(error), retry_after=error.retry_after)
    except TooManyRequests as error:
        return json_error(429, str(error), retry_after=error.retry_after)
    except asyncio.CancelledError:
        raise
    except Exception:  # noqa: BLE001 - every expected error has its status above; the rest is a bug
        logger.exception("unhandled error on %s %s", request.method, request.path)
        return json_error(500, "internal server error; the server log has the details")


async def _nosniff(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["X-Content-Type-Options"] = "nosniff"


async def _sweep_context(app: web.Application) -> AsyncIterator[None]:
    """Ends sessions idle for longer than the session timeout, every few seconds."""
    async def sweep() -> None:
        config = app[CONFIG]
        while True:
            await asyncio.sleep(config.sweep_seconds)
            expired = app[SESSIONS].expire(config.session_idle_seconds)
            if expired:
                logger.info("%d idle session(s) expired", expired)

    task = asyncio.create_task(sweep())
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def create_app(config: DeployConfig) -> web.Application:
    """The deploy server's application over a loaded policy."""
    app = web.Application(client_max_size=config.max_body_bytes, middlewares=[error_middleware])
    app[CONFIG] = config
    app[SESSIONS] = Sessions(config.max_sessions)
    app[MASK_RULE] = MaskRule(config.policy.algorithm)
    app[LOGIN_THROTTLE] = LoginThrottle()
    app.router.add_routes([
        web.post("/shepherd/login_user/", login_user),
        web.post("/shepherd/env/", env_step),
        web.post("/shepherd/logout/", logout),
    ])
    app.on_response_prepare.append(_nosniff)
    app.cleanup_ctx.append(_sweep_context)
    return app
