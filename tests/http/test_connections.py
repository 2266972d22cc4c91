"""Connection limits on a real socket (127.0.0.1 only, a bounded number of connections): silent and slow
connections are closed, connections over the limit are refused at once, and a flood costs a few log lines."""

import asyncio
import logging
import socket
from unittest import mock

import aiohttp
import pytest

from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import ServerConfig
from shepherd.http.server import RunningServer

OBS4 = [0.01, -0.02, 0.03, 0.04]
WAIT = 20  # generous bound for what the server should do within a second or two


def graph_manager():
    return GraphManager(owner="tests", schedule=Schedule(), agents=[
        AgentSpec("pole", "PPO", [[4], "-inf", "inf"], 2, {"n_envs": 2, "n_steps": 8, "batch_size": 8})])


@pytest.fixture
async def start(tmp_path):
    servers = []

    async def start(**config):
        server = await RunningServer.start(ServerConfig(graph_manager(), tmp_path / "data", **config), "127.0.0.1", 0)
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.stop()


async def login_status(server) -> int:
    async with aiohttp.ClientSession() as http:
        async with http.post(server.url + "/shepherd/login_user/",
                             json={"apikey": server.created_keys["pole"]}) as response:
            return response.status


async def test_silent_connections_over_the_limit_are_refused_then_closed_and_logged_once(start, caplog):
    server = await start(max_connections=8, header_timeout_seconds=0.5, max_connections_per_address=0)  # no cap
    port = int(server.url.rsplit(":", 1)[1])
    caplog.set_level(logging.INFO, logger="shepherd.wire.connections")
    silent = [await asyncio.open_connection("127.0.0.1", port) for _ in range(30)]  # never send a byte
    replies = await asyncio.gather(*(asyncio.wait_for(reader.read(), WAIT) for reader, _ in silent))
    refused = [reply for reply in replies if reply.startswith(b"HTTP/1.1 503 ")]
    assert len(refused) == 22 and all(b'{"error":' in reply and b"maximum of open connections" in reply
                                      for reply in refused)
    assert replies.count(b"") == 8  # the 8 accepted ones were closed for sending no request
    for _, writer in silent:
        writer.close()
    assert await login_status(server) == 200  # the slots are free again for a good client
    lines = [record.getMessage() for record in caplog.records if record.name == "shepherd.wire.connections"]
    assert sum("refusing connections" in line for line in lines) == 1, lines
    assert sum("sent no request headers" in line for line in lines) == 1, lines


async def silent(port, source="127.0.0.1", count=1):
    return [await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)) for _ in range(count)]


async def refused(reader):
    reply = await asyncio.wait_for(reader.read(), WAIT)  # to the end: a refused connection is closed
    return reply.startswith(b"HTTP/1.1 429 ") and b"Retry-After: 1" in reply and b'{"error":' in reply, reply


async def test_one_address_holds_at_most_its_share_of_connections_and_others_still_connect(start, caplog):
    server = await start(max_connections=20, max_connections_per_address=3, header_timeout_seconds=WAIT)
    port = int(server.url.rsplit(":", 1)[1])
    caplog.set_level(logging.INFO, logger="shepherd.wire.connections")
    held = await silent(port, count=3)  # one client's connections, sending nothing
    for reader, writer in await silent(port, count=2):
        ok, reply = await refused(reader)
        writer.close()
        assert ok and b"this address has its maximum of 3 open connections" in reply, reply
        assert b"--max-connections-per-address" in reply
    (reader, writer), = await silent(port, "127.0.0.2")  # another address is not held up
    writer.write(b"GET /shepherd/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert (await asyncio.wait_for(reader.read(), WAIT)).startswith(b"HTTP/1.1 200 ")
    writer.close()
    held.pop()[1].close()  # the client closes one: it may open one again
    for _ in range(100):
        if await login_status(server) == 200:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("a closed connection's slot was not given back to its address")
    for _, writer in held:
        writer.close()
    lines = [r.getMessage() for r in caplog.records if "max-connections-per-address" in r.getMessage()]
    assert len(lines) == 1 and "127.0.0.1" in lines[0], lines  # refusals logged once, naming the address


async def test_by_default_an_address_holds_half_the_connections(start):
    server = await start(max_connections=8, header_timeout_seconds=WAIT)
    port = int(server.url.rsplit(":", 1)[1])
    held = await silent(port, count=4)
    (reader, writer), = await silent(port)
    assert (await refused(reader))[0]
    writer.close()
    for _, writer in held:
        writer.close()


async def test_a_trusted_proxy_holds_any_number_of_connections(start):
    proxied = await start(max_connections=8, max_connections_per_address=2, trusted_proxies=("127.0.0.1",),
                          header_timeout_seconds=WAIT)
    port = int(proxied.url.rsplit(":", 1)[1])
    held = await silent(port, count=5)  # the proxy carries many clients' connections
    assert await login_status(proxied) == 200
    for _, writer in held:
        writer.close()


async def test_a_body_that_does_not_arrive_gets_408_and_the_connection_is_closed(start):
    server = await start(body_timeout_seconds=0.5)
    port = int(server.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /shepherd/login_user/ HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100\r\n\r\n{")  # announces 100 bytes, sends one
    await writer.drain()
    reply = await asyncio.wait_for(reader.read(), WAIT)  # read() to the end: the server closes
    assert reply.startswith(b"HTTP/1.1 408 ") and b'"error":"the body did not arrive' in reply
    writer.close()


async def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(start):
    server = await start(idle_timeout_seconds=0.5)
    port = int(server.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /shepherd/openapi.json HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    assert (await asyncio.wait_for(reader.readline(), WAIT)).startswith(b"HTTP/1.1 200 ")
    await asyncio.wait_for(reader.read(), WAIT)  # the rest of the reply, then EOF once idle
    assert reader.at_eof()
    writer.close()


async def test_out_of_open_files_is_logged_once_not_per_accept(start, caplog):
    server = await start()
    loop = asyncio.get_running_loop()
    handler = loop.get_exception_handler()
    assert handler is server.resource_errors
    caplog.set_level(logging.INFO)
    for _ in range(200):  # what asyncio reports at every failed accept() while out of open files
        handler(loop, {"message": "socket.accept() out of system resource",
                       "exception": OSError(24, "Too many open files")})
    lines = [record for record in caplog.records if "out of open files" in record.getMessage()]
    assert len(lines) == 1 and lines[0].exc_info is None
    await server.stop()
    assert loop.get_exception_handler() is not handler  # restored when the server stops


async def test_a_client_dropping_mid_upload_is_one_info_line_without_a_traceback(start, caplog):
    server = await start()
    port = int(server.url.rsplit(":", 1)[1])
    caplog.set_level(logging.DEBUG)
    for _ in range(3):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /shepherd/login_user/ HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"apikey\": ")  # a third of the body, then gone
        await writer.drain()
        writer.close()
        await writer.wait_closed()
    for _ in range(WAIT * 10):  # until the server has noticed all three
        if sum("cut off" in record.getMessage() for record in caplog.records) == 3:
            break
        await asyncio.sleep(0.1)
    cut = [record for record in caplog.records if "cut off" in record.getMessage()]
    assert len(cut) == 3 and all(record.levelno == logging.INFO and record.exc_info is None for record in cut)
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING or record.exc_info]
    assert await login_status(server) == 200


async def test_every_reply_has_nosniff_and_malformed_http_gets_a_json_400(start, caplog):
    server = await start()
    port = int(server.url.rsplit(":", 1)[1])
    async with aiohttp.ClientSession() as http:
        for method, path in (("POST", "/shepherd/login_user/"), ("GET", "/shepherd/openapi.json"),
                             ("GET", "/shepherd/nowhere/"), ("GET", "/shepherd/admin/")):
            async with http.request(method, server.url + path, json={"apikey": "x"}) as response:
                assert response.headers["X-Content-Type-Options"] == "nosniff", path
    caplog.set_level(logging.DEBUG)
    for garbage in (b"NOT HTTP AT ALL\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n"):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(garbage)
        await writer.drain()
        reply = await asyncio.wait_for(reader.read(), WAIT)
        head, _, body = reply.partition(b"\r\n\r\n")
        assert head.split(b"\r\n")[0].endswith(b" 400 Bad Request") and b"Content-Type: application/json" in head
        assert b"X-Content-Type-Options: nosniff" in head
        assert body.startswith(b'{"error":"the request is not valid HTTP/1.1')
        writer.close()
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING or record.exc_info]


def connect_now(port, source, count):
    """``count`` connections from ``source``, made by the kernel before the server's loop runs again (blocking
    connects: the server accepts them in one burst)."""
    made = []
    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((source, 0))
        sock.connect(("127.0.0.1", port))
        made.append(sock)
    return made


async def health_status(sock):
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_sendall(sock, b"GET /shepherd/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    reply = b""
    try:
        while chunk := await asyncio.wait_for(loop.sock_recv(sock, 65536), WAIT):
            reply += chunk
    except ConnectionResetError:  # refused and closed before the request was read
        pass
    return int(reply.split(b" ", 2)[1]) if reply else None


async def test_refused_connections_do_not_count_against_the_others(start):
    """Issue 48, M7: connections an address re-opens after its refusal counted as open until closed, so a burst of
    them filled the server and a good client's connection among them got 503. Refused ones count for nothing."""
    server = await start(max_connections=8, header_timeout_seconds=WAIT)  # an address holds 4
    port = int(server.url.rsplit(":", 1)[1])
    held = await silent(port, count=4)
    burst = connect_now(port, "127.0.0.1", 20)  # all refused (429): the address holds its 4
    good, = connect_now(port, "127.0.0.2", 1)  # accepted in the same burst, after them
    try:
        assert await health_status(good) == 200
    finally:
        for sock in [*burst, good]:
            sock.close()
        for _, writer in held:
            writer.close()


async def test_the_last_slots_are_kept_for_addresses_that_hold_none(start):
    """Issue 48, M7: two addresses holding their share each (half of --max-connections) took every slot; the last
    tenth are kept for addresses that hold no connection yet."""
    server = await start(max_connections=10, header_timeout_seconds=WAIT)  # an address holds 5; 1 slot kept
    port = int(server.url.rsplit(":", 1)[1])
    first = await silent(port, "127.0.0.1", 5)
    second = await silent(port, "127.0.0.2", 4)
    (reader, writer), = await silent(port, "127.0.0.2")  # its 5th would take the kept slot: refused
    reply = await asyncio.wait_for(reader.read(), WAIT)
    writer.close()
    assert reply.startswith(b"HTTP/1.1 503 ") and b"kept for addresses" in reply, reply
    good, = connect_now(port, "127.0.0.3", 1)
    try:
        assert await health_status(good) == 200
    finally:
        good.close()
        for _, writer in first + second:
            writer.close()


class FakeTransport:
    def __init__(self, address):
        self.address, self.written, self.closed = address, b"", False

    def get_extra_info(self, name, default=None):
        return (self.address, 1234, 0, 0) if name == "peername" else default

    def write(self, data):
        self.written += data

    def close(self):
        self.closed = True


def test_the_addresses_of_one_ipv6_64_share_its_cap():
    """Issue 48, M7: the per-address cap counts an IPv6 /64 as one address (a client holding a prefix changes
    addresses at will); the next /64 is another."""
    from shepherd.wire.connections import ConnectionGuard
    guard = ConnectionGuard(mock.Mock(connections={}, request_factory=None), 100, 10.0, per_address=3)
    admitted = [guard.admit(object(), FakeTransport(f"2001:db8:1:2::{host:x}")) for host in range(1, 6)]
    assert admitted == [True, True, True, False, False]
    assert guard.admit(object(), FakeTransport("2001:db8:1:3::1"))
