"""The client protocol's three operations (docs/protocol.md), each from a body and the client's address to a
reply: the public routes (``app.py``) and the front ends' batch endpoint (``internal.py``) both call them, so
an operation answers alike whichever way it came. A domain error is raised, for `errors.error_reply`."""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable

import orjson
from aiohttp import web

from shepherd.agents import AgentClosed
from shepherd.front.frames import NOT_HERE, SnapshotNote
from shepherd.graph import Acted, Gone, Session
from shepherd.http.protocol import STEP_FIELDS, parse_login, parse_object, session_key
from shepherd.http.state import CONFIG, GRAPH, LOGIN_THROTTLE, POLICY_IN_REPLY, RATE_LIMITER
from shepherd.level.episodes import Phase
from shepherd.wire.spaces import action_to_json, space_to_json
from shepherd.storage import hash_key
from shepherd.wire import BadRequest, parse_greedy_step
from shepherd.wire.experience import EXPERIENCE_FIELDS
from shepherd.wire.tensors import HEADER as TENSORS_HEADER, plain

#: the header of a policy file's version (``POST /shepherd/policy/``)
POLICY_VERSION_HEADER = "Shepherd-Policy-Version"

#: where a reply keeps the note that its session's steps may be answered from a snapshot (`SnapshotNote`),
#: for the front ends' batch endpoint; the public routes ignore it
SNAPSHOT_NOTE = web.ResponseKey("snapshot_note", SnapshotNote)
#: on a reply to a step a front end answered from its snapshot: whether it was recorded now (not a retry's repeat)
RECORDED_NOW = web.ResponseKey("recorded_now", bool)
#: a step or upload body larger than this is parsed and checked on a worker thread, not on the event loop: one
#: key's large observations must not hold up every other agent's steps (issue 39, M2; uploads: issue 48, M4)
INLINE_BODY_BYTES = 64 << 10
#: the worker threads that parse those bodies (shared by every key; more large bodies wait for them)
PARSE_WORKERS = 2


@functools.cache
def _parse_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(PARSE_WORKERS, thread_name_prefix="shepherd-parse")


async def _parsed(body: bytes, parse: Callable[..., Any], *args: Any) -> Any:
    """``parse(*args)``, on a worker thread when ``body`` is large."""
    if len(body) <= INLINE_BODY_BYTES:
        return parse(*args)
    return await asyncio.get_running_loop().run_in_executor(_parse_pool(), functools.partial(parse, *args))


def _json(data: object) -> web.Response:
    return web.Response(body=orjson.dumps(data), content_type="application/json")


def _count_request(app: web.Application, session: Session, cost: int | None = None) -> None:
    """Charge the session's key ``cost`` environment steps (default: one per env, a step of each)."""
    limiter = app.get(RATE_LIMITER)
    if limiter is not None:  # environment steps: a vector session's request is one per env
        limiter.take(session.client_id, cost=cost if cost is not None else session.n_envs or 1)


async def login_reply(app: web.Application, body: bytes, address: str, json_length: int | None = None
                      ) -> web.Response:
    """Log in (``POST /shepherd/login_user/``)."""
    login = parse_login(body, json_length)
    graph, throttle = app[GRAPH], app[LOGIN_THROTTLE]
    throttle.check(address)  # an address blocked by its failed attempts gets 429, its key untried
    limiter = app.get(RATE_LIMITER)
    if limiter is not None:  # before the session is opened: a refused login holds no slot
        limiter.take(hash_key(login.apikey))
    try:
        await graph.prepare_client(login.apikey, login.client)  # a new client's learner, built off the loop
        session = graph.login(login.apikey, login.evaluate_only, login.n_envs, login.client, login.acting)
    except PermissionError:
        await asyncio.sleep(throttle.failed(address))  # slows down guessing, never blocks the loop
        raise
    try:  # a login that fails from here on (the learner refused it or did not plan in time, a reply the wire
        # cannot carry) holds no session: it would count toward the agent's session limit until it expired
        introduction = session.level.introduction()  # an environment's roles; None: the agent's name and spaces
        reply = {"ok": True, "session_key": session.key, **(introduction if introduction is not None else {
            "agent": session.runtime.record.name, "observation_space": space_to_json(session.observation_space),
            "action_space": space_to_json(session.action_space)})}
        reply.update(await session.opened(graph.act_timeout))
        if login.policy_in_reply:  # a client-acting login's (parse_login refuses it on others)
            app[POLICY_IN_REPLY].add(session)
            reply["policy_in_reply"] = True
        if session.n_envs is not None:
            reply["n_envs"] = session.n_envs
        if session.runtime.client is not None:
            reply["client"] = session.runtime.client
        if session.mask_space is not None:
            reply["action_masks"] = True
        if graph.evaluates_only:  # run.py --evaluate: every login, whatever it asked, as the deploy server says
            reply["mode"] = "evaluate"
        return _noted(_json(reply), _front_ends_snapshot(app, session))
    except Exception:
        graph.logout(session.key)
        raise


def _front_ends_snapshot(app: web.Application, session: Session) -> tuple[str, int, int | None] | None:
    """`Session.snapshot`, on a head with front ends that answer from snapshots (only they read the note)."""
    config = app[CONFIG]
    return session.snapshot if config.front_end_token is not None and config.front_end_snapshots else None


def _noted(reply: web.Response, snapshot: tuple[str, int, int | None] | None) -> web.Response:
    """The reply, with the note a front end needs to answer the session's next steps itself, if it may
    (``snapshot``: the session's `Session.snapshot`)."""
    if snapshot is not None:
        reply[SNAPSHOT_NOTE] = SnapshotNote(*snapshot)
    return reply


async def step_reply(app: web.Application, body: bytes, address: str, json_length: int | None = None
                     ) -> web.Response:
    """One step, single or vector (``POST /shepherd/env/``); ``"obs": null`` logs out. ``json_length``: the
    body's ``Inference-Header-Content-Length`` (binary tensors follow its JSON; None: all JSON)."""
    data = await _parsed(body, parse_object, body, STEP_FIELDS, json_length)
    graph = app[GRAPH]
    session = graph.session(session_key(data))
    _count_request(app, session)
    step = await _parsed(body, session.parse_step, data)
    if step is None:
        graph.logout(session.key)
        return _json({"ok": True})
    acted = await graph.step(session, step)
    return _noted(_acted(session, acted), _front_ends_snapshot(app, session))


def _acted(session: Session, acted: Acted) -> web.Response:
    """A step's reply: the action (a vector session's: every env's) and the policy version that chose it."""
    body = session.level.reply_body(acted.action)  # an environment's, by role
    if body is not None:
        return _json({**body, **acted.fields})
    space = session.action_space
    if session.n_envs is not None:
        return _json({"actions": [action_to_json(space, action) for action in acted.action],
                      "policy_version": acted.policy_version, **acted.fields})
    if acted.action is None:
        return _json({"action": None, **acted.fields})
    return _json({"action": action_to_json(space, acted.action), "policy_version": acted.policy_version,
                  **acted.fields})


async def experience_reply(app: web.Application, body: bytes, address: str, json_length: int | None = None
                           ) -> web.Response:
    """One upload of a client-acting session (``POST /shepherd/experience/``): learned from (heatup, training)
    or recorded (evaluation, deployment), with what the client does next."""
    data = await _parsed(body, parse_object, body, EXPERIENCE_FIELDS, json_length)  # a large one off the loop
    graph = app[GRAPH]
    session = graph.session(session_key(data))
    _count_request(app, session, session.level.upload_steps())  # before the check: a refused upload costs no work
    experience = await _parsed(body, session.parse_upload, data)
    acted = await graph.step(session, experience)
    plan = acted.action
    if session in app[POLICY_IN_REPLY]:
        # the next block acts with another file than the one the upload was drawn with (another version or
        # phase): it comes in the reply (issue 47, docs/acting.md), so a rollout costs one round trip; a retry's
        # reply carries it again
        version, onnx = await session.policy(experience.policy_version, graph.act_timeout,
                                             getattr(session.level, "upload_phase", None))
        if onnx is not None:
            return _with_tensors({**plan, "policy_version": version}, "policy", onnx)
    return _json(plan)


def _with_tensors(data: dict[str, Any], key: str, payload: bytes) -> web.Response:
    """A reply in the binary layout of requests (docs/protocol.md, "Binary tensors"): ``data`` with ``key`` as a
    UINT8 tensor of ``payload``'s bytes, the JSON's length in the Inference-Header-Content-Length header."""
    header = orjson.dumps({**data, key: {"datatype": "UINT8", "shape": [len(payload)],
                                         "binary_data_size": len(payload)}})
    return web.Response(body=header + payload, content_type="application/octet-stream",
                        headers={TENSORS_HEADER: str(len(header))})


async def policy_reply(app: web.Application, body: bytes, address: str, json_length: int | None = None
                       ) -> web.Response:
    """The behaviour policy a client-acting session acts with now (``POST /shepherd/policy/``): an ONNX file,
    or 304 when the client names the version it holds and that file is still the one to act with."""
    data = plain(parse_object(body, {"session_key", "policy_version", "phase"}, json_length))
    graph = app[GRAPH]
    session = graph.session(session_key(data))
    held = data.get("policy_version")
    if held is not None and (isinstance(held, bool) or not isinstance(held, int)):
        raise BadRequest("'policy_version' must be the whole number of the version the client holds")
    held_phase = _phase(data.get("phase"))
    try:
        version, onnx = await session.policy(held, graph.act_timeout, held_phase)
    except AgentClosed:  # its learner stopped while it waited: for the agent's deletion, the session is gone
        if session.gone is None:
            raise
        raise Gone(session.gone) from None
    if onnx is None:
        return web.Response(status=304, headers={POLICY_VERSION_HEADER: str(held)})
    _count_request(app, session, session.level.upload_steps())  # a 304 (the cheap check of the file held) costs nothing
    return web.Response(body=onnx, content_type="application/octet-stream",
                        headers={POLICY_VERSION_HEADER: str(version)})


def _phase(text: Any) -> Phase | None:
    """The phase of the policy file a client holds (a fetch's ``"phase"``: the file's metadata's), or None.

    Raises: BadRequest naming the phases."""
    if text is None:
        return None
    try:
        return Phase(text)
    except (ValueError, TypeError):  # (a list or an object: unhashable)
        names = ", ".join(repr(phase.value) for phase in Phase)
        raise BadRequest(f"'phase' must be the phase of the file held, one of {names}, not {text!r}") from None


class NotHere(RuntimeError):
    """A front end's greedy step of a session the head does not let front ends answer (any more): the front
    end sends the client's step again as an ordinary one (`NOT_HERE`)."""

    status = NOT_HERE


def greedy_reply_now(app: web.Application, body: bytes) -> web.Response | None:
    """A step a front end answered from its snapshot of the session's greedy policy (the front ends' batch
    endpoint only): recorded as the session's next step, with the action the front end chose, or, repeating
    the last ``seq``, answered as that step was. The reply is the public step route's. Answered at once, on
    the caller's turn of the event loop; None (nothing done) for a retry of a step still waiting for its
    action, which `greedy_reply` waits for."""
    step = parse_greedy_step(body)
    session = app[GRAPH].session(step.session_key)
    snapshot = session.snapshot
    if snapshot is None:
        raise NotHere(f"session {session.key[:8]}... is not answered from a snapshot")
    if session.repeats_waiting_step(step):  # before it counts: `greedy_reply` waits for it, and counts it
        return None
    _count_request(app, session)
    acted = session.record(step)
    assert acted is not None
    reply = _noted(_acted(session, acted), snapshot)
    reply[RECORDED_NOW] = session.last_step is step  # (a retry is answered as its step was, and kept the old one)
    return reply


async def greedy_reply(app: web.Application, body: bytes, address: str, json_length: int | None = None
                       ) -> web.Response:
    """`greedy_reply_now`, waiting for the answer of a retried step still in flight."""
    reply = greedy_reply_now(app, body)
    if reply is not None:
        return reply
    step = parse_greedy_step(body)
    graph = app[GRAPH]
    session = graph.session(step.session_key)
    _count_request(app, session)
    return _noted(_acted(session, await graph.step(session, step)), session.snapshot)


async def logout_reply(app: web.Application, body: bytes, address: str, json_length: int | None = None
                       ) -> web.Response:
    """Log out (``POST /shepherd/logout/``)."""
    data = plain(parse_object(body, {"session_key"}, json_length))
    app[GRAPH].logout(session_key(data))
    return _json({"ok": True})


ClientOperation = Callable[[web.Application, bytes, str, "int | None"], Awaitable[web.Response]]

#: the client protocol's routes and their operations, by the name the batch endpoint gives them
CLIENT_OPERATIONS: dict[str, tuple[str, ClientOperation]] = {
    "login": ("/shepherd/login_user/", login_reply),
    "step": ("/shepherd/env/", step_reply),
    "logout": ("/shepherd/logout/", logout_reply),
    "greedy": ("/shepherd/env/", greedy_reply),
    "experience": ("/shepherd/experience/", experience_reply),
    "policy": ("/shepherd/policy/", policy_reply),
}
