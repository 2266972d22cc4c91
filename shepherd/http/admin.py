"""The JSON admin API under ``/shepherd/admin/api/``: thin handlers over `shepherd.admin.Operations`.

A request is authorised by ``Authorization: Bearer <token>`` (the admin token, the server's local
credential, or one of an agent's API keys, which gives access to that agent only), or by the dashboard's
sign-in cookie, in which case a state-changing request must also carry the sign-in's CSRF token in
``X-CSRF-Token``. Errors are the domain exceptions, mapped to statuses by the error middleware.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from shepherd.admin import Forbidden, NewAgent, Operations, Principal
from shepherd.definition import AgentDefinition, Filters, Sharing
from shepherd.lessons import parse_lessons
from shepherd.graph import Unauthorized
from shepherd.http.errors import BadRequest
from shepherd.http.protocol import parse_object
from shepherd.http.signins import COOKIE, CSRF_HEADER, csrf_matches
from shepherd.http.state import ADMIN, LOGIN_THROTTLE, SIGNINS

API = "/shepherd/admin/api"
AGENT = API + "/agents/{agent_id:\\d{1,12}}"  # route pattern of one agent's resources
KEY = API + "/keys/{key_id:\\d{1,12}}"
ENVIRONMENT_KEY = API + "/environments/keys/{key_id:\\d{1,12}}"
USER = API + "/users/{user_id:\\d{1,12}}"
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
NO_STORE = {"Cache-Control": "no-store"}


def respond(data: Any, status: int = 200) -> web.Response:
    """A JSON reply (records are dataclasses, which orjson writes as objects), never cached."""
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json", headers=NO_STORE)


def principal(request: web.Request) -> Principal:
    """Who sends the request: from its Bearer token, or from its sign-in cookie (CSRF-checked).

    Raises:
        Unauthorized: no credential, or an unknown, revoked or expired one.
        Forbidden: a cookie-authorised change without the sign-in's CSRF token.
    """
    service = request.app[ADMIN]
    header = request.headers.get("Authorization")
    if header is not None:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("send the token as 'Authorization: Bearer <token>'")
        throttle, address = request.app[LOGIN_THROTTLE], request.remote or "?"
        throttle.check(address)  # an address blocked by failed credentials gets 429, its token untried
        try:
            return service.authenticate(token.strip())
        except Unauthorized:
            throttle.failed(address)  # the next attempt waits out the block (429 until then)
            raise
    signins = request.app[SIGNINS]
    signin = signins.get(request.cookies.get(COOKIE))
    if signin is None:
        raise Unauthorized("sign in with the admin token or an API key, or send 'Authorization: Bearer <token>'")
    if request.method not in SAFE_METHODS and not csrf_matches(signin, request.headers.get(CSRF_HEADER)):
        raise Forbidden(f"missing or wrong {CSRF_HEADER} header; reload the dashboard")
    try:
        return service.authenticate_digest(signin.digest)
    except Unauthorized:
        signins.end(signin.id)
        raise


def operations(request: web.Request) -> Operations:
    return request.app[ADMIN].acting_as(principal(request))


async def body_object(request: web.Request, fields: set[str]) -> dict[str, Any]:
    """The request's JSON object (an empty body is an empty object); raises BadRequest."""
    body = await request.read()
    return parse_object(body, fields) if body.strip() else {}


def agent_id(request: web.Request) -> int:
    return int(request.match_info["agent_id"])


def text_field(data: dict[str, Any], name: str, default: str | None = None) -> str:
    value = data.get(name, default)
    if not isinstance(value, str):
        raise BadRequest(f"'{name}' (a string) is required")
    return value


# -- who am I, users, algorithms --------------------------------------------------------------------
async def whoami(request: web.Request) -> web.Response:
    return respond(await operations(request).whoami())


async def list_users(request: web.Request) -> web.Response:
    return respond(await operations(request).users())


async def add_user(request: web.Request) -> web.Response:
    ops = operations(request)
    ops.require_admin("adding users")  # before reading the body: a key holder learns nothing from it
    data = await body_object(request, {"name"})
    return respond(await ops.add_user(text_field(data, "name")), status=201)


async def list_algorithms(request: web.Request) -> web.Response:
    return respond(await operations(request).algorithms())


async def reset_admin_token(request: web.Request) -> web.Response:
    ops = operations(request)
    ops.require_admin("replacing the admin token")
    await body_object(request, set())
    return respond({"token": await ops.reset_admin_token()})


# -- agents ---------------------------------------------------------------------------------------
NEW_AGENT_FIELDS = {"owner", "name", "algorithm", "observation_space", "action_space", "parameters", "sharing",
                    "filters", "lessons"}


async def list_agents(request: web.Request) -> web.Response:
    return respond(await operations(request).agents())


async def add_agent(request: web.Request) -> web.Response:
    ops = operations(request)
    ops.require_admin("adding agents")
    data = await body_object(request, NEW_AGENT_FIELDS)
    for name in ("observation_space", "action_space"):
        if name not in data:
            raise BadRequest(f"'{name}' is required (the JSON space syntax of docs/protocol.md)")
    parameters = data.get("parameters", {})
    if not isinstance(parameters, dict):
        raise BadRequest("'parameters' must be an object of name: value")
    try:
        sharing = Sharing.parse(text_field(data, "sharing", Sharing.POOLED.value))
        filters = Filters.parse(data.get("filters"))
        lessons = parse_lessons(data.get("lessons"))
    except ValueError as error:
        raise BadRequest(str(error)) from None
    new = NewAgent(owner=text_field(data, "owner"), definition=AgentDefinition(
        name=text_field(data, "name"), algorithm=text_field(data, "algorithm"),
        observation_space=data["observation_space"], action_space=data["action_space"], parameters=parameters,
        sharing=sharing, filters=filters, lessons=lessons))
    return respond(await ops.add_agent(new), status=201)


async def show_agent(request: web.Request) -> web.Response:
    return respond(await operations(request).agent(agent_id(request)))


# -- the curve ------------------------------------------------------------------------------------
def query_number(request: web.Request, name: str, kind: type) -> Any:
    raw = request.query.get(name)
    if raw is None:
        return None
    try:
        return kind(raw)
    except ValueError:
        raise BadRequest(f"query parameter {name!r} must be a number") from None


# -- training metrics -----------------------------------------------------------------------------
#: rows a metrics reply holds by default, and at most
METRIC_ROWS, MAX_METRIC_ROWS = 500, 10_000
MAX_COLUMNS_LENGTH = 2000


async def agent_metrics(request: web.Request) -> web.Response:
    """The last rows of the agent's training metrics: ``{"columns": [...], "rows": [[...], ...]}``, oldest
    first; ``rows`` limits them, ``columns`` (comma-separated names) picks columns."""
    ops = operations(request)
    rows = query_number(request, "rows", int)
    rows = METRIC_ROWS if rows is None else rows
    if not 1 <= rows <= MAX_METRIC_ROWS:
        raise BadRequest(f"query parameter 'rows' must be between 1 and {MAX_METRIC_ROWS}")
    raw = request.query.get("columns")
    if raw is not None and len(raw) > MAX_COLUMNS_LENGTH:
        raise BadRequest(f"query parameter 'columns' is at most {MAX_COLUMNS_LENGTH} characters")
    columns = [name for name in raw.split(",") if name] if raw else None
    return respond(await ops.metrics(agent_id(request), rows, columns))


# -- special actions ------------------------------------------------------------------------------
async def model_zip(request: web.Request) -> web.Response:
    ops = operations(request)
    view = await ops.agent(agent_id(request))
    data = await ops.export_model(view.id)
    return web.Response(body=data, content_type="application/zip", headers={
        **NO_STORE, "Content-Disposition": f'attachment; filename="{view.owner}-{view.name}-model.zip"'})


#: each export format's file name ending and content type
EXPORT_FILES = {"sb3": ("model.zip", "application/zip"), "onnx": ("policy.onnx", "application/octet-stream")}


async def export_agent(request: web.Request) -> web.Response:
    """The agent's export in the ``format`` query parameter (``sb3``, the default, or ``onnx``); an advised
    agent's is the ``client`` named, or its best client's."""
    ops = operations(request)
    view = await ops.agent(agent_id(request))
    format = request.query.get("format", "sb3")
    client = request.query.get("client")
    data = await ops.export_policy(view.id, format, client)  # an unknown format is refused here, before the lookup below
    ending, content_type = EXPORT_FILES[format]
    name = f"{view.owner}-{view.name}-{client}" if client else f"{view.owner}-{view.name}"
    return web.Response(body=data, content_type=content_type, headers={
        **NO_STORE, "Content-Disposition": f'attachment; filename="{name}-{ending}"'})


async def delete_model(request: web.Request) -> web.Response:
    ops = operations(request)
    await body_object(request, set())
    return respond(await ops.delete_model(agent_id(request)))


async def delete_returns(request: web.Request) -> web.Response:
    ops = operations(request)
    await body_object(request, set())
    return respond(await ops.delete_returns(agent_id(request)))


async def restart_agent(request: web.Request) -> web.Response:
    ops = operations(request)
    await body_object(request, set())
    return respond(await ops.restart(agent_id(request)))


async def delete_agent(request: web.Request) -> web.Response:
    ops = operations(request)
    ops.require_admin("deleting agents")
    await body_object(request, set())
    return respond(await ops.delete_agent(agent_id(request)))


async def set_parameters(request: web.Request) -> web.Response:
    ops = operations(request)
    data = await body_object(request, {"parameters"})
    values = data.get("parameters")
    if not isinstance(values, dict):
        raise BadRequest("'parameters' (an object of name: value) is required")
    return respond(await ops.set_parameters(agent_id(request), values))


async def set_lesson(request: web.Request) -> web.Response:
    """Move an agent to one of its lessons by hand (docs/lessons.md)."""
    ops = operations(request)
    data = await body_object(request, {"lesson"})
    return respond(await ops.set_lesson(agent_id(request), text_field(data, "lesson")))


async def delete_user(request: web.Request) -> web.Response:
    ops = operations(request)
    ops.require_admin("deleting users")
    data = await body_object(request, {"with_agents"})
    with_agents = data.get("with_agents", False)
    if not isinstance(with_agents, bool):
        raise BadRequest("'with_agents' must be true or false")
    return respond(await ops.delete_user(int(request.match_info["user_id"]), with_agents))


# -- API keys -------------------------------------------------------------------------------------
async def list_keys(request: web.Request) -> web.Response:
    ops = operations(request)
    return respond(await ops.keys(query_number(request, "agent", int)))


async def add_key(request: web.Request) -> web.Response:
    ops = operations(request)
    ops.require_admin("adding API keys")
    data = await body_object(request, {"label"})
    return respond(await ops.add_key(agent_id(request), text_field(data, "label", "")), status=201)


async def list_environments(request: web.Request) -> web.Response:
    return respond(await operations(request).environments())


async def add_environment_key(request: web.Request) -> web.Response:
    ops = operations(request)
    ops.require_admin("adding API keys")
    data = await body_object(request, {"environment", "label"})
    return respond(await ops.add_environment_key(text_field(data, "environment", ""), text_field(data, "label", "")),
                   status=201)


async def list_environment_keys(request: web.Request) -> web.Response:
    ops = operations(request)
    return respond(await ops.environment_keys(request.query.get("environment")))


async def revoke_environment_key(request: web.Request) -> web.Response:
    ops = operations(request)
    ops.require_admin("revoking API keys")
    await body_object(request, set())
    return respond(await ops.revoke_environment_key(int(request.match_info["key_id"])))


async def revoke_key(request: web.Request) -> web.Response:
    ops = operations(request)
    ops.require_admin("revoking API keys")
    await body_object(request, set())
    return respond(await ops.revoke_key(int(request.match_info["key_id"])))
