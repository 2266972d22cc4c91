"""A front end's aiohttp application: the client protocol's routes batched to the head, everything else
forwarded to it. It holds no session, no store and no learner: the head owns them all (docs/front-ends.md).
The steps of evaluate-mode sessions are answered here from a snapshot of the greedy policy and recorded by
the head (``greedy.py``).

A login, step or logout is read and size-checked here, then joins the batch of everything that arrived in
the same turn of the event loop (at most `frames.MAX_ITEMS` items, one body's limit of bytes in all), which
goes to the head as one ``POST /internal/steps`` over a kept-alive connection; each client gets its own
answer as the head streams it back. Any other request (admin API, dashboard, ``/metrics``, health) is
forwarded as it came, its reply streamed back. Every reply carries ``X-Shepherd-Front-End: <pid>``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from typing import AsyncIterator, Awaitable, Callable

import aiohttp
import orjson
from aiohttp import web
from multidict import CIMultiDict

from shepherd.front.frames import (ADDRESS_HEADER, CONTENT_TYPE, FRONT_END_HEADER, INTERNAL_PATH, INTERNAL_PATHS,
                                   MAX_ITEMS, TOKEN_HEADER, FrameError, Item, SnapshotNote, answer_header,
                                   encode_items)
from shepherd.front.snapshot_cache import SNAPSHOT_HEADER, SnapshotCache
from shepherd.wire.addresses import Network, forwarded_client, trusted
from shepherd.wire.replies import http_error, json_error
from shepherd.wire.steps import DEFAULT_MAX_REWARD, BadRequest
from shepherd.wire.tensors import HEADER as TENSORS_HEADER, json_length

logger = logging.getLogger(__name__)

#: the client protocol's routes, by the operation the batch endpoint names
CLIENT_ROUTES = {"/shepherd/login_user/": "login", "/shepherd/env/": "step", "/shepherd/logout/": "logout"}
#: headers of one connection, never forwarded (RFC 9110 7.6.1), and those this hop sets itself
_HOP_BY_HOP = frozenset(name.lower() for name in (
    "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection", "TE", "Trailer",
    "Transfer-Encoding", "Upgrade", "Content-Length", "Host", "Date", "Server", TOKEN_HEADER, ADDRESS_HEADER))
UNREACHABLE = "the server cannot be reached from this front end just now; retry"


@dataclass(frozen=True)
class FrontConfig:
    """What a front end needs: where the head's private port is, this run's token, and the limits the
    head's own public port would apply (body size, body and idle timeouts)."""

    head_url: str
    token: str
    max_body_bytes: int = 1 << 20
    body_timeout_seconds: float = 30.0
    idle_timeout_seconds: float = 75.0
    #: reverse proxies whose X-Forwarded-For names the client of a login, step or logout batched to the head
    trusted_proxies: tuple[Network, ...] = ()
    #: the head's bound on rewards (``--max-reward``): the steps a front end answers are checked as the head would
    max_reward: float = DEFAULT_MAX_REWARD


@dataclass(frozen=True)
class Answer:
    """One item's answer: what the public route would have sent."""

    status: int
    body: bytes
    retry_after: str | None = None
    note: SnapshotNote | None = None  # the session's steps may be answered from this snapshot

    def response(self, snapshot_version: int | None = None) -> web.Response:
        """The reply to the client (``snapshot_version``: the step was answered from a snapshot of it)."""
        headers = {} if self.retry_after is None else {"Retry-After": self.retry_after}
        if snapshot_version is not None:
            headers[SNAPSHOT_HEADER] = str(snapshot_version)
        return web.Response(status=self.status, body=self.body, content_type="application/json",
                            headers=headers or None)


_UNREACHABLE = Answer(503, orjson.dumps({"error": UNREACHABLE}), "1")


class Batcher:
    """Collects the client operations of one event-loop turn and sends them to the head as one batch; a
    batch is cut early at `MAX_ITEMS` items or when the next body would take it past one body's limit.
    Batches are sent concurrently, each on a kept-alive connection of ``session``'s pool."""

    def __init__(self, session: aiohttp.ClientSession, config: FrontConfig) -> None:
        self.session = session
        self.url = config.head_url + INTERNAL_PATH
        self.headers = {TOKEN_HEADER: config.token, "Content-Type": CONTENT_TYPE}
        self.max_bytes = config.max_body_bytes
        self._pending: list[tuple[Item, asyncio.Future[Answer]]] = []
        self._bytes = 0
        self._scheduled = False
        self._sending: set[asyncio.Task[None]] = set()

    def submit(self, item: Item) -> asyncio.Future[Answer]:
        """Queue one operation; the future gets its answer (503 with Retry-After when the head cannot be
        reached: a step with ``seq`` is safe to send again)."""
        if self._pending and (len(self._pending) >= MAX_ITEMS or self._bytes + len(item.body) > self.max_bytes):
            self._flush()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Answer] = loop.create_future()
        self._pending.append((item, future))
        self._bytes += len(item.body)
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)  # after the handlers this turn runs: they join the same batch
        return future

    def _flush(self) -> None:
        self._scheduled = False
        if not self._pending:
            return
        batch, self._pending, self._bytes = self._pending, [], 0
        task = asyncio.create_task(self._send(batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[tuple[Item, asyncio.Future[Answer]]]) -> None:
        futures = [future for _, future in batch]
        try:
            async with self.session.post(self.url, data=encode_items([item for item, _ in batch]),
                                         headers=self.headers) as reply:
                if reply.status != 200:
                    logger.error("the head refused a batch (%d): %s", reply.status, (await reply.read())[:200])
                    raise FrameError(f"status {reply.status}")
                for _ in batch:
                    index, status, retry_after, length, note = answer_header(await reply.content.readline())
                    body = await reply.content.readexactly(length)
                    if 0 <= index < len(futures) and not futures[index].done():
                        futures[index].set_result(Answer(status, body, retry_after, note))
        except (aiohttp.ClientError, OSError, FrameError, asyncio.IncompleteReadError) as error:
            logger.warning("a batch of %d item(s) got no full answer from the head: %s", len(batch), error)
        finally:
            for future in futures:  # whatever the head did not answer: the client may retry
                if not future.done():
                    future.set_result(_UNREACHABLE)

    async def close(self) -> None:
        """Wait for the batches on their way (at shutdown)."""
        self._flush()
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)


BATCHER = web.AppKey("batcher", Batcher)
SNAPSHOTS = web.AppKey("snapshots", SnapshotCache)
CONFIG = web.AppKey("config", FrontConfig)
SESSION = web.AppKey("session", aiohttp.ClientSession)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def _read_body(request: web.Request) -> bytes:
    """The whole body, within the body timeout; raises HTTPRequestEntityTooLarge (checked on the declared
    length before reading, and by aiohttp while reading) and TimeoutError."""
    length = request.content_length
    if length is not None and length > request.client_max_size:
        raise web.HTTPRequestEntityTooLarge(max_size=request.client_max_size, actual_size=length)
    async with asyncio.timeout(request.app[CONFIG].body_timeout_seconds):
        return await request.read()


def _client_address(request: web.Request) -> str:
    """The peer's address, or, from a trusted proxy, its client's as its X-Forwarded-For says (the head's login
    throttle counts it; the head applies the same rule itself to requests forwarded as they came)."""
    proxies = request.app[CONFIG].trusted_proxies
    if proxies and trusted(request.remote, proxies):
        client = forwarded_client(request.headers.getall("X-Forwarded-For", []), proxies)
        if client is not None:
            return client
    return request.remote or "?"


async def client_operation(request: web.Request) -> web.StreamResponse:
    """A login, step or logout: read here, answered by the head in a batch (a step of a session noted for a
    snapshot: answered here, recorded by the head)."""
    body = await _read_body(request)
    try:
        length = json_length(request.headers.get(TENSORS_HEADER))  # binary tensors after the JSON
    except BadRequest as error:
        return json_error(400, str(error))
    op, address, snapshots = CLIENT_ROUTES[request.path], _client_address(request), request.app[SNAPSHOTS]
    if op == "step":
        answered = await snapshots.answer(body, address, length)
        if answered is not None:
            answer, version = answered
            return answer.response(snapshot_version=version)
    answer = await request.app[BATCHER].submit(Item(op, address, body, length))
    if answer.note is not None or (op in ("logout", "step") and snapshots.sessions):  # a noted session's step
        # answered without a note may be answered here no more ("obs": null ended it; the head refused it)
        snapshots.note(_session_key(op, body if length is None else body[:length], answer), answer.note)
    return answer.response()


def _session_key(op: str, body: bytes, answer: Answer) -> str | None:
    """The session an answer is about: a login's from its reply, a step's from its body."""
    try:
        key = orjson.loads(answer.body if op == "login" else body).get("session_key")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return key if isinstance(key, str) else None


async def forward(request: web.Request) -> web.StreamResponse:
    """Any other request, forwarded to the head with the client's address (vouched for by the token);
    the reply is streamed back as the head sends it (a model's zip, say)."""
    if request.path in INTERNAL_PATHS:  # the head's private endpoints are never reachable through here
        raise web.HTTPNotFound()
    body = await _read_body(request) if request.body_exists else None
    headers = CIMultiDict((name, value) for name, value in request.headers.items()
                          if name.lower() not in _HOP_BY_HOP)
    headers[TOKEN_HEADER] = request.app[CONFIG].token
    headers[ADDRESS_HEADER] = request.remote or "?"
    url = request.app[CONFIG].head_url + request.raw_path
    try:
        async with request.app[SESSION].request(request.method, url, headers=headers, data=body,
                                                allow_redirects=False) as upstream:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for name, value in upstream.headers.items():
                if name.lower() not in _HOP_BY_HOP:
                    response.headers.add(name, value)
            if upstream.content_length is not None:
                response.content_length = upstream.content_length
            await response.prepare(request)
            async for chunk in upstream.content.iter_chunked(1 << 16):
                await response.write(chunk)
            await response.write_eof()
            return response
    except (aiohttp.ClientError, OSError) as error:
        logger.warning("forwarding %s %s failed: %s", request.method, request.path, error)
        return json_error(503, UNREACHABLE, retry_after=1)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's own errors (413, 404, 405) and a late body as the head words them."""
    try:
        return await handler(request)
    except web.HTTPException as error:
        if error.status < 400:
            raise
        return http_error(request, error)
    except TimeoutError:
        timeout = request.app[CONFIG].body_timeout_seconds
        response = json_error(408, f"the body did not arrive within {timeout:g} s; send it at once")
        response.force_close()
        return response


async def _stamp(request: web.Request, response: web.StreamResponse) -> None:
    response.headers[FRONT_END_HEADER] = str(os.getpid())
    response.headers["X-Content-Type-Options"] = "nosniff"


async def _head_session(app: web.Application) -> AsyncIterator[None]:
    # kept-alive connections to the head; no overall time limit: a step may wait up to the act timeout, an
    # export longer. auto_decompress off: a forwarded reply goes back byte for byte
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
    session = aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=5))
    app[SESSION] = session
    app[BATCHER] = Batcher(session, app[CONFIG])
    app[SNAPSHOTS] = SnapshotCache(session, app[CONFIG].head_url, app[CONFIG].token, app[BATCHER].submit,
                                   app[CONFIG].max_reward)
    yield
    await app[SNAPSHOTS].close()
    await app[BATCHER].close()
    await session.close()


def create_app(config: FrontConfig) -> web.Application:
    """A front end's application (it reaches the head on startup's first request, not before)."""
    app = web.Application(client_max_size=config.max_body_bytes, middlewares=[_errors])
    app[CONFIG] = config
    for path in CLIENT_ROUTES:
        app.router.add_post(path, client_operation)
    app.router.add_route("*", "/{tail:.*}", forward)
    app.on_response_prepare.append(_stamp)
    app.cleanup_ctx.append(_head_session)
    return app
