"""Domain errors mapped to JSON HTTP errors in one middleware: never a 200, never an ``ok`` key, never
a traceback."""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

import orjson
from aiohttp import web

from shepherd.admin import Forbidden, Invalid
from shepherd.agents import AgentClosed, AgentFailed
from shepherd.graph import Conflict, Unauthorized
from shepherd.storage import AlreadyExists, NotFound

logger = logging.getLogger(__name__)


class BadRequest(ValueError):
    """The body is malformed or does not fit the agent's spaces."""


class Overloaded(RuntimeError):
    """The agent could not answer in time; the client should retry after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def json_error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=orjson.dumps({"error": message}), content_type="application/json",
                        headers=headers)


_STATUS = ((BadRequest, 400), (Invalid, 400), (Unauthorized, 401), (Forbidden, 403), (NotFound, 404),
           (Conflict, 409), (AlreadyExists, 409))

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as error:
        if error.status < 400:
            raise
        message = {404: f"no such path: {request.path}", 405: f"{request.method} is not allowed on {request.path}",
                   413: "the body is too large"}.get(error.status, error.reason)
        return json_error(error.status, message)
    except (AgentFailed, AgentClosed) as error:
        return json_error(503, f"the agent is not available: {error}", {"Retry-After": "5"})
    except Overloaded as error:
        return json_error(503, str(error), {"Retry-After": str(error.retry_after)})
    except asyncio.CancelledError:
        raise
    except Exception as error:  # noqa: BLE001 - every domain error has its status; the rest is a bug
        for kind, status in _STATUS:
            if isinstance(error, kind):
                return json_error(status, str(error))
        logger.exception("unhandled error on %s %s", request.method, request.path)
        return json_error(500, "internal server error; the server log has the details")
