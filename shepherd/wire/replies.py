"""The JSON error replies of both servers, the learning server's (``shepherd/http``) and the deploy server's
(``shepherd/deploy``): one wording, so a client sees the same errors from either. aiohttp only, no torch."""

from __future__ import annotations

import math

import orjson
from aiohttp import web

#: how an error of aiohttp's own (a path or method the server has not, a body over the limit) is worded
HTTP_MESSAGES = {404: "no such path: {path}", 405: "{method} is not allowed on {path}",
                 413: "the body is too large (limit {limit} bytes)"}


def retry_after_header(seconds: float) -> str:
    """Retry-After takes whole seconds; never 0, which would invite an immediate retry storm."""
    return str(max(1, math.ceil(seconds)))


def json_error(status: int, message: str, retry_after: float | None = None) -> web.Response:
    """``{"error": message}`` with the status (and a Retry-After, when given)."""
    headers = None if retry_after is None else {"Retry-After": retry_after_header(retry_after)}
    return web.Response(status=status, body=orjson.dumps({"error": message}), content_type="application/json",
                        headers=headers)


def http_error(request: web.Request, error: web.HTTPException) -> web.Response:
    """aiohttp's own error (status 400 or above) as a JSON error."""
    message = HTTP_MESSAGES.get(error.status, "{reason}").format(
        path=request.path, method=request.method, reason=error.reason, limit=request.client_max_size)
    return json_error(error.status, message)
