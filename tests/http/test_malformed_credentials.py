"""Credentials whose bytes are no UTF-8 (aiohttp hands them over as strings that `str.encode` refuses) are refused
as wrong ones, 401 or 403, on a raw socket: they answered 500 with a traceback in the log, and the failed-credential
throttle never counted them (an admin token, the metrics' token, a CSRF token)."""

import asyncio

API = "/shepherd/admin/api"


async def raw(api, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", api.client.server.port)
    writer.write(request)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(4096), 10)
    writer.close()
    return data


async def test_a_bearer_token_of_bytes_that_are_no_utf8_is_a_wrong_token(api):
    data = await raw(api, b"GET /shepherd/admin/api/whoami HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe\r\n"
                          b"Connection: close\r\n\r\n")
    assert data.startswith(b"HTTP/1.1 401"), data[:200]
    data = await raw(api, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 1.2.3.4\r\nAuthorization: Bearer \xff\r\n"
                          b"Connection: close\r\n\r\n")
    assert data.startswith(b"HTTP/1.1 401"), data[:200]


async def test_a_csrf_token_of_bytes_that_are_no_utf8_is_a_wrong_one(api):
    response = await api.client.post(API + "/signin", json={"token": api.token})
    cookie = response.cookies["shepherd_signin"].value
    data = await raw(api, b"POST /shepherd/admin/api/agents/1/delete-returns HTTP/1.1\r\nHost: x\r\nCookie: shepherd_signin="
                          + cookie.encode() + b"\r\nX-CSRF-Token: \xff\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    assert data.startswith(b"HTTP/1.1 403"), data[:200]


async def test_an_internal_token_of_bytes_that_are_no_utf8_is_not_this_runs_token(aiohttp_client, tmp_path):
    from shepherd.front.frames import INTERNAL_PATH, TOKEN_HEADER
    from shepherd.http import ServerConfig, create_app
    from tests.http.test_admin_api import graph_manager

    app = create_app(ServerConfig(graph_manager(), tmp_path / "data", front_end_token="token"))
    client = await aiohttp_client(app)
    for path in ("/shepherd/health", INTERNAL_PATH):
        reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n{TOKEN_HEADER}: ".encode() + b"\xff\r\nConnection: close\r\n\r\n")
        await writer.drain()
        data = await asyncio.wait_for(reader.read(4096), 10)
        writer.close()
        assert not data.startswith(b"HTTP/1.1 500"), (path, data[:200])
