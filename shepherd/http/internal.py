"""The head's side of the front ends (``run.py --front-ends K``, ``shepherd/front/``): the batch endpoint
``POST /internal/steps``, which runs many clients' operations from one body and streams each answer back as
soon as it is ready; ``GET /internal/snapshot``, a learner's greedy policy as a front end runs it (to answer
evaluate-mode steps itself); and the middleware that guards them with this run's token. They exist only
when ``ServerConfig.front_end_token`` is set, on the head's private loopback port.

The token also lets a front end vouch for a forwarded request's client address (the admin API, the
dashboard, ``/metrics``): the login throttle, the rate limits and the loopback rule of ``/metrics`` see the
real client's address, never the front end's. Without the token a request is taken as it came.
"""

from __future__ import annotations

import asyncio
import hmac
import logging

from aiohttp import web
from aiohttp.typedefs import Middleware

from shepherd.front.frames import (ADDRESS_HEADER, CONTENT_TYPE, INTERNAL_PATH, INTERNAL_PATHS, MAX_HEADER_BYTES,
                                   MAX_ITEMS, NOT_HERE, SNAPSHOT_PATH, TOKEN_HEADER, FrameError, Item, answer_frame,
                                   decode_items)
from shepherd.graph.runtime import AgentRuntime
from shepherd.graph.sessions import snapshot_name
from shepherd.http.errors import Handler, error_reply
from shepherd.http.operations import CLIENT_OPERATIONS, RECORDED_NOW, SNAPSHOT_NOTE, NotHere, greedy_reply_now
from shepherd.http.state import CONFIG, GRAPH, METRICS, ServerConfig
from shepherd.wire.replies import HTTP_MESSAGES, json_error
from shepherd.wire import BadRequest
from shepherd.policies import onnx_snapshot

#: the longest a front end's fetch of a greedy file waits for its build (then 204: it asks again later)
GREEDY_FILE_SECONDS = 30.0
#: the public route a ``greedy`` item is counted under
STEP_ROUTE = CLIENT_OPERATIONS["greedy"][0]

__all__ = ["INTERNAL_PATH", "SNAPSHOT_PATH", "front_end_middleware", "internal_snapshot", "internal_steps"]

logger = logging.getLogger(__name__)


def front_end_middleware(config: ServerConfig) -> Middleware:
    """The outermost middleware of a head with front ends. On the batch endpoint: 404 without a token, 401
    with a wrong one (compared in constant time, never logged); with the right one, the body may hold a
    whole batch. Elsewhere: a request with the right token gets the client address its front end sent."""
    assert config.front_end_token is not None
    expected = config.front_end_token.encode()
    # a batch: at most MAX_ITEMS frames whose bodies the front end keeps within one body's limit in all
    batch_limit = config.max_body_bytes + MAX_ITEMS * (MAX_HEADER_BYTES + 1)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        sent = request.headers.get(TOKEN_HEADER)
        trusted = sent is not None and hmac.compare_digest(sent.encode("utf-8", "surrogatepass"), expected)
        if request.path in INTERNAL_PATHS:
            if sent is None:
                return json_error(404, HTTP_MESSAGES[404].format(path=request.path))
            if not trusted:
                return json_error(401, "the internal endpoint needs this run's token")
            return await handler(request.clone(client_max_size=batch_limit))
        address = request.headers.get(ADDRESS_HEADER)
        if trusted and address:
            return await handler(request.clone(remote=address))
        return await handler(request)

    return middleware


async def internal_steps(request: web.Request) -> web.StreamResponse:
    """Run a batch's items concurrently (started in their order, so a session's steps keep theirs) and
    stream one answer frame per item as it is ready: a slow item (a step waiting for an update, a failed
    login's delay) holds up no other. An item runs to its end even if the front end went away meanwhile,
    so a step it carried is recorded once and a client's retry with the same ``seq`` gets its answer."""
    try:
        items = decode_items(await request.read())
    except FrameError as error:
        raise BadRequest(str(error)) from None
    app = request.app
    ready: list[bytes] = []  # greedy items answered at once (`_answer_now`), sent first in one write
    tasks = []
    for index, item in enumerate(items):
        answered = _answer_now(app, index, item) if item.op == "greedy" else None
        if answered is not None:
            ready.append(answered)
        else:
            tasks.append(asyncio.ensure_future(_answer(app, index, item)))
    response = web.StreamResponse(headers={"Content-Type": CONTENT_TYPE, "Cache-Control": "no-store"})
    await response.prepare(request)
    connected = True
    if ready:
        try:
            await response.write(b"".join(ready))
        except ConnectionError:
            connected = False
            logger.info("a front end went away before its batch was answered")
    for next_done in asyncio.as_completed(tasks):
        data = await next_done
        if connected:
            try:
                await response.write(data)
            except ConnectionError:  # the front end died: its clients retry through another one
                connected = False
                logger.info("a front end went away before its batch was answered")
    if connected:
        await response.write_eof()
    return response


def _answer_now(app: web.Application, index: int, item: Item) -> bytes | None:
    """A ``greedy`` item's answer frame, on this turn of the event loop: no task, no wait (None: it must
    wait, for a retried step in flight; `_answer` then answers it)."""
    try:
        reply = greedy_reply_now(app, item.body)
    except NotHere as error:
        return _not_here(index, error)
    except Exception as error:  # noqa: BLE001 - mapped as error_middleware maps it
        reply = error_reply(error, "POST", STEP_ROUTE)
    if reply is None:
        return None
    return _framed(app, index, item, reply, STEP_ROUTE)


def _not_here(index: int, error: NotHere) -> bytes:
    """Not a client's answer, and not counted: the front end sends the client's step again, as a step."""
    return answer_frame(index, NOT_HERE, json_error(NOT_HERE, str(error)).body, None)  # type: ignore[arg-type]


def _framed(app: web.Application, index: int, item: Item, reply: web.Response, path: str) -> bytes:
    """An item's answer frame, counted under its public route."""
    app[METRICS].count_request("POST", path, reply.status)
    if item.op == "greedy" and reply.status == 200 and reply.get(RECORDED_NOW):  # (not a retry's repeat)
        app[METRICS].snapshot_steps.inc()
    body = reply.body
    assert isinstance(body, bytes)
    return answer_frame(index, reply.status, body, reply.headers.get("Retry-After"), reply.get(SNAPSHOT_NOTE))


async def _answer(app: web.Application, index: int, item: Item) -> bytes:
    """An item's answer frame: the status, body and Retry-After its public route would have sent."""
    path, operation = CLIENT_OPERATIONS[item.op]
    limit = app[CONFIG].max_body_bytes
    if len(item.body) > limit:  # the front end checks it first; this keeps the head's rule its own
        reply = json_error(413, HTTP_MESSAGES[413].format(limit=limit))
    else:
        try:
            reply = await operation(app, item.body, item.address, item.json_length)
        except NotHere as error:
            return _not_here(index, error)
        except Exception as error:  # noqa: BLE001 - mapped as error_middleware maps it
            reply = error_reply(error, "POST", path)
    return _framed(app, index, item, reply, path)


async def internal_snapshot(request: web.Request) -> web.Response:
    """``GET /internal/snapshot?name=NAME&newer=V``: the greedy snapshot ``NAME`` (`snapshot_name`, from an
    answer's note) as `shepherd.policies.greedy_snapshot` bytes, if its learner published a version newer than ``V``; 204
    when it has not (yet: asking makes it publish), 404 when no learner has that snapshot (any more)."""
    name = request.query.get("name", "")
    try:
        newer = int(request.query.get("newer", "-1"))
    except ValueError:
        raise BadRequest("'newer' must be a policy version (an integer)") from None
    for runtime in request.app[GRAPH].every_runtime():
        if snapshot_name(runtime) == name:
            if runtime.greedy_file_snapshots and runtime.learner.failure is None:
                return await _greedy_file(runtime, name, newer)
            greedy = getattr(runtime.learner, "greedy", None)
            if greedy is None or not greedy.portable or runtime.learner.failure is not None:
                break
            data = greedy.snapshot_bytes(name, runtime.observation_space, runtime.action_space, newer)
            if data is None:
                return web.Response(status=204)
            return web.Response(body=data, content_type="application/octet-stream",
                                headers={"Cache-Control": "no-store"})
    return _no_snapshot(name)


def _no_snapshot(name: str) -> web.Response:
    return json_error(404, f"no snapshot {name!r} here (its agent was restarted, deleted or has failed)")


async def _greedy_file(runtime: AgentRuntime, name: str, newer: int) -> web.Response:
    """An image agent's snapshot: its greedy ONNX file (`shepherd.policies.onnx_snapshot`), built by its learner
    once per version (the first ask waits for the build: at most `GREEDY_FILE_SECONDS`, then 204, as before
    a numpy snapshot is published); 404 when it has none."""
    try:
        version, data = await runtime.greedy_file(GREEDY_FILE_SECONDS)
    except TimeoutError:
        return web.Response(status=204)
    except Exception as error:  # noqa: BLE001 - not exportable, or the learner failed or closed meanwhile
        logger.warning("agent %s: no greedy file for front ends: %s", runtime.label, error)
        return _no_snapshot(name)
    if version <= newer:
        return web.Response(status=204)
    return web.Response(body=onnx_snapshot.encode(name, version, data), content_type="application/octet-stream",
                        headers={"Cache-Control": "no-store"})
