"""Domain errors mapped to JSON HTTP errors in one middleware: never a 200, never an ``ok`` key, never
a traceback, never a key or a secret echoed back."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Awaitable, Callable

import orjson
from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from shepherd.admin import Forbidden, Invalid
from shepherd.agents import AgentClosed, AgentFailed, LearnerUnavailable, NotClientActing, StalePolicy
from shepherd.agents.export.behaviour import NotActableAtClient
from shepherd.graph import ActTimeout, BadClient, Conflict, Gone, TooManyEnvs, TooManySessions, Unauthorized, WrongShape
from shepherd.http.limits import TooManyRequests
from shepherd.http.state import CONFIG
from shepherd.storage import AlreadyExists, NotFound
from shepherd.wire.replies import http_error, json_error
from shepherd.wire import BadRequest

logger = logging.getLogger(__name__)

#: an absolute path (a server's file), not a ratio such as steps/s
_PATH = re.compile(r"(?<![\w.])/(?:[\w.\-]+/)*[\w.\-]+")


_STATUS = ((BadRequest, 400), (NotClientActing, 400), (NotActableAtClient, 400), (BadClient, 400), (Invalid, 400), (WrongShape, 400), (TooManyEnvs, 400),
           (Unauthorized, 401), (Forbidden, 403), (NotFound, 404), (Conflict, 409), (AlreadyExists, 409), (Gone, 410))

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Map domain errors to JSON errors; refuse a body whose declared length is over the limit before
    reading any of it (413); read the body within the body timeout (408), so no handler waits for one."""
    try:
        length = request.content_length
        if length is not None and length > request.client_max_size:
            raise web.HTTPRequestEntityTooLarge(max_size=request.client_max_size, actual_size=length)
        if request.body_exists:
            config = request.app.get(CONFIG)
            timeout = config.body_timeout_seconds if config is not None else None
            try:
                async with asyncio.timeout(timeout):
                    await request.read()  # kept by the request: the handler's read() returns it
            except (ConnectionError, RequestPayloadError) as error:
                # the client dropped (or broke) its upload: nobody is left to answer, and it is no bug
                logger.info("%s %s from %s: the body was cut off (%s)", request.method, request.path,
                            request.remote, error)
                request.protocol.force_close()
                return json_error(400, "the body was cut off")
            except TimeoutError:
                # answered and closed now: aiohttp would otherwise linger, reading the rest of the body
                response = json_error(408, f"the body did not arrive within {timeout:g} s; send it at once")
                response.force_close()
                await response.prepare(request)
                await response.write_eof()
                request.protocol.force_close()
                return response
        return await handler(request)
    except web.HTTPException as error:
        if error.status < 400:
            raise
        return http_error(request, error)
    except asyncio.CancelledError:
        raise
    except Exception as error:  # noqa: BLE001 - error_reply maps every domain error; the rest is a bug
        return error_reply(error, request.method, request.path)


def error_reply(error: Exception, method: str, path: str) -> web.Response:
    """The JSON error a domain error becomes (its status, and a Retry-After where a retry helps); any
    other exception is a bug: logged with its traceback, answered 500. Used by `error_middleware` and by
    the front ends' batch endpoint (``internal.py``), so both answer alike."""
    if isinstance(error, (AgentFailed, AgentClosed)):  # a learner's reason may quote a file of the server's
        return json_error(503, f"the agent is not available: {_PATH.sub('<path>', str(error))}", retry_after=5)
    if isinstance(error, (ActTimeout, LearnerUnavailable)):
        return json_error(503, str(error), retry_after=error.retry_after)
    if isinstance(error, StalePolicy):  # the version to act with instead, for the client to fetch
        return web.Response(status=409, body=orjson.dumps({"error": str(error), "policy_version": error.policy_version}),
                            content_type="application/json")
    if isinstance(error, (TooManyRequests, TooManySessions)):
        return json_error(429, str(error), retry_after=error.retry_after)
    for kind, status in _STATUS:
        if isinstance(error, kind):
            return json_error(status, str(error))
    logger.error("unhandled error on %s %s", method, path, exc_info=error)
    return json_error(500, "internal server error; the server log has the details")
