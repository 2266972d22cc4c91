"""Behind a reverse proxy (``--trusted-proxy``, issue 39 M3): the client's address comes from the trusted
proxy's X-Forwarded-For, so one client's failed logins block that client, not everyone behind the proxy, and
the ``local`` rule of ``/metrics`` judges the client; from any other peer the header is ignored. The test
client connects from 127.0.0.1, which the tests declare (or not) a trusted proxy."""

import pytest

from shepherd.http import CREATED_KEYS, ServerConfig, create_app
from shepherd.http.proxies import forwarded_client, parse_networks
from shepherd.http.state import LOGIN_THROTTLE
from tests.http.test_hardening import graph_manager

PROXY = ("127.0.0.1",)


@pytest.fixture
def make_client(aiohttp_client, tmp_path):
    async def make(**config):
        app = create_app(ServerConfig(graph_manager(), tmp_path / "data", **config))
        client = await aiohttp_client(app)
        client.apikey = app[CREATED_KEYS]["pole"]
        return client
    return make


async def fail_logins(client, times, forwarded=None):
    headers = {} if forwarded is None else {"X-Forwarded-For": forwarded}
    statuses = []
    for _ in range(times):
        response = await client.post("/shepherd/login_user/", json={"apikey": "guess"}, headers=headers)
        statuses.append(response.status)
    return statuses


async def test_one_client_s_failed_logins_behind_a_trusted_proxy_block_that_client_only(make_client):
    client = await make_client(trusted_proxies=PROXY)
    throttle = client.server.app[LOGIN_THROTTLE]
    throttle.free, throttle.base_delay, throttle.max_delay = 2, 0.05, 0.05
    assert await fail_logins(client, 3, "203.0.113.9") == [401, 401, 401]
    assert {address: record.count for address, record in throttle._failures.items()} == {"203.0.113.9": 3}
    throttle.base_delay = throttle.max_delay = 600.0
    throttle.failed("203.0.113.9")  # its next failure blocks it for long
    response = await client.post("/shepherd/login_user/", json={"apikey": client.apikey},
                                 headers={"X-Forwarded-For": "203.0.113.9"})
    assert response.status == 429  # the attacker is blocked ...
    response = await client.post("/shepherd/login_user/", json={"apikey": client.apikey},
                                 headers={"X-Forwarded-For": "198.51.100.7"})
    assert response.status == 200, await response.text()  # ... the proxy's other clients are not


async def test_a_client_cannot_escape_its_count_by_writing_x_forwarded_for_itself(make_client):
    client = await make_client(trusted_proxies=PROXY)
    throttle = client.server.app[LOGIN_THROTTLE]
    throttle.free, throttle.base_delay, throttle.max_delay = 2, 0.05, 0.05
    # the proxy appends the address it saw (203.0.113.9) to whatever the client sent
    await fail_logins(client, 2, "198.51.100.1, 203.0.113.9")
    await fail_logins(client, 1, "198.51.100.2, 203.0.113.9")
    assert {address: record.count for address, record in throttle._failures.items()} == {"203.0.113.9": 3}


async def test_without_a_trusted_proxy_x_forwarded_for_is_ignored(make_client):
    client = await make_client()
    throttle = client.server.app[LOGIN_THROTTLE]
    throttle.free, throttle.base_delay, throttle.max_delay = 2, 0.05, 0.05
    await fail_logins(client, 3, "203.0.113.9")
    assert set(throttle._failures) == {"127.0.0.1"}  # the peer's own address: a header proves nothing


@pytest.mark.parametrize("forwarded, status", [
    (None, 401),  # the proxy said nothing of its client: not local
    ("203.0.113.9", 401),  # a client elsewhere
    ("::1", 200),  # a client on the proxy's loopback, as the proxy says
    ("127.0.0.1", 401),  # an address of the trusted proxy itself: no client named, so none is local
    ("127.0.0.1, 203.0.113.9", 401),  # a client elsewhere claiming loopback
])
async def test_the_local_rule_of_metrics_judges_a_trusted_proxy_s_client(make_client, forwarded, status):
    client = await make_client(trusted_proxies=PROXY)
    headers = {} if forwarded is None else {"X-Forwarded-For": forwarded}
    response = await client.get("/metrics", headers=headers)
    assert response.status == status, await response.text()


def test_the_client_is_the_rightmost_address_that_is_no_trusted_proxy():
    networks = parse_networks(["10.0.0.0/8", "::1"])
    assert forwarded_client(["198.51.100.1, 203.0.113.9, 10.1.2.3"], networks) == "203.0.113.9"
    assert forwarded_client(["198.51.100.1", "203.0.113.9"], networks) == "203.0.113.9"  # two headers, in order
    assert forwarded_client(["10.0.0.1, 10.0.0.2"], networks) is None  # only proxies
    assert forwarded_client(["203.0.113.9, unknown"], networks) is None  # garbage: nothing to its left believed
    assert forwarded_client([], networks) is None
    with pytest.raises(ValueError, match="not an IP address"):
        parse_networks(["proxy.example"])


@pytest.mark.parametrize("peer, forwarded, address", [
    ("127.0.0.1", "198.51.100.1, 203.0.113.9", "203.0.113.9"),  # from the trusted proxy: its client
    ("127.0.0.1", None, "127.0.0.1"),  # the proxy named no client
    ("192.0.2.5", "203.0.113.9", "192.0.2.5"),  # from anyone else: the header is ignored
])
def test_a_front_end_batches_a_trusted_proxy_s_login_under_its_client_s_address(peer, forwarded, address):
    from unittest import mock

    from aiohttp import web
    from aiohttp.test_utils import make_mocked_request

    from shepherd.front import app as front

    application = web.Application()
    application[front.CONFIG] = front.FrontConfig("http://127.0.0.1:1", "token",
                                                  trusted_proxies=parse_networks(PROXY))
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (peer, 1234) if name == "peername" else default
    request = make_mocked_request("POST", "/shepherd/login_user/", app=application, transport=transport,
                                  headers={} if forwarded is None else {"X-Forwarded-For": forwarded})
    assert front._client_address(request) == address


async def test_failed_logins_from_the_addresses_of_one_ipv6_64_count_as_one_client(make_client):
    """Issue 48, L11: 12 bad keys from 12 addresses of one IPv6 /64 were never slowed; a /64 is one site's (it
    holds 2^64 addresses), so its failures count together, and the block covers every address in it."""
    client = await make_client(trusted_proxies=PROXY)
    throttle = client.server.app[LOGIN_THROTTLE]
    throttle.free, throttle.base_delay, throttle.max_delay = 2, 0.01, 0.01
    for host in range(1, 13):
        assert await fail_logins(client, 1, f"2001:db8:1:2::{host:x}") == [401]
    assert {address: record.count for address, record in throttle._failures.items()} == {"2001:db8:1:2::/64": 12}
    throttle.base_delay = throttle.max_delay = 600.0
    throttle.failed("2001:db8:1:2::1")  # its next failure blocks the /64 for long
    response = await client.post("/shepherd/login_user/", json={"apikey": client.apikey},
                                 headers={"X-Forwarded-For": "2001:db8:1:2:ffff::99"})
    assert response.status == 429  # another address of the same /64 is blocked too ...
    response = await client.post("/shepherd/login_user/", json={"apikey": client.apikey},
                                 headers={"X-Forwarded-For": "2001:db8:1:3::1"})
    assert response.status == 200, await response.text()  # ... the next /64 is not
