"""The dashboard: one page and its files (plain HTML, CSS and JavaScript shipped in the package; no build
step, nothing loaded from elsewhere), and the sign-in endpoints it uses.

The page signs in with the admin token or an API key (``POST .../signin``), which sets an HttpOnly,
SameSite=Strict cookie and returns the sign-in's CSRF token; the page keeps that token in memory and sends
it with every POST. Every dashboard response forbids framing and inline scripts (Content-Security-Policy).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import web

from shepherd.graph import Unauthorized
from shepherd.http.admin import API, body_object, principal, respond, text_field
from shepherd.http.errors import BadRequest
from shepherd.http.signins import COOKIE
from shepherd.http.state import ADMIN, CONFIG, DASHBOARD_FILES, LOGIN_THROTTLE, SIGNINS
from shepherd.storage import hash_key

PAGE = "/shepherd/admin/"
STATIC_DIR = Path(__file__).resolve().parent / "static"
CONTENT_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
MAX_TOKEN_LENGTH = 256


def load_files(folder: Path = STATIC_DIR) -> dict[str, bytes]:
    """The dashboard's files by name, read once when the app is created."""
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())
            if path.is_file() and path.suffix in CONTENT_TYPES}


def _file(request: web.Request, name: str) -> web.Response:
    files = request.app[DASHBOARD_FILES]
    if name not in files:
        raise web.HTTPNotFound()
    content_type = CONTENT_TYPES[Path(name).suffix]
    return web.Response(body=files[name], content_type=content_type, charset="utf-8", headers=SECURITY_HEADERS)


async def page(request: web.Request) -> web.Response:
    return _file(request, "index.html")


async def to_page(request: web.Request) -> web.Response:
    raise web.HTTPFound(PAGE)


async def static_file(request: web.Request) -> web.Response:
    return _file(request, request.match_info["name"])


async def signin(request: web.Request) -> web.Response:
    """Sign in with a token; sets the sign-in cookie and returns who signed in and the CSRF token."""
    token = text_field(await body_object(request, {"token"}), "token").strip()
    if not token or len(token) > MAX_TOKEN_LENGTH:
        raise BadRequest("'token' is the admin token or an API key")
    service, throttle, address = request.app[ADMIN], request.app[LOGIN_THROTTLE], request.remote or "?"
    throttle.check(address)  # failed sign-ins, logins and Bearer tokens count alike
    try:
        signer = service.authenticate(token)
    except Unauthorized:
        await asyncio.sleep(throttle.failed(address))
        raise
    who = await service.acting_as(signer).whoami()
    opened = request.app[SIGNINS].open(hash_key(token))
    response = respond({**who, "csrf": opened.csrf})
    response.set_cookie(COOKIE, opened.id, path=PAGE.rstrip("/"), httponly=True, samesite="Strict",
                        secure=request.secure or request.app[CONFIG].secure_cookies)
    return response


async def signin_state(request: web.Request) -> web.Response:
    """Who the sign-in cookie belongs to and its CSRF token (for a page that was reloaded); 401 if none."""
    opened = request.app[SIGNINS].get(request.cookies.get(COOKIE))
    if opened is None:
        raise Unauthorized("not signed in")
    service = request.app[ADMIN]
    who = await service.acting_as(principal(request)).whoami()
    return respond({**who, "csrf": opened.csrf})


async def signout(request: web.Request) -> web.Response:
    principal(request)  # a cookie sign-out must carry the CSRF token too
    request.app[SIGNINS].end(request.cookies.get(COOKIE, ""))
    response = respond({"signed_out": True})
    response.del_cookie(COOKIE, path=PAGE.rstrip("/"))
    return response


SIGNIN = API + "/signin"
SIGNOUT = API + "/signout"
STATIC = PAGE + "static/{name:[A-Za-z0-9_.-]+}"
