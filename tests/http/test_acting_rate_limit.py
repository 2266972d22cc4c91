"""The rate limit on client-acting sessions (issue 48, M5): an upload costs its T x N environment steps, a policy
fetch answered with the file costs as much as the session's upload, and a 304 costs nothing."""

from __future__ import annotations

import numpy as np

from shepherd.http import CREATED_KEYS, ServerConfig, create_app
from tests.http.test_upload_poison import block, pendulum

T = 64


async def open_session(aiohttp_client, tmp_path, burst: float):
    """A session of one env (T = 64) on a server whose key refills one step a second from ``burst``."""
    app = create_app(ServerConfig(pendulum(), tmp_path / "data", requests_per_second_per_key=1.0,
                                  burst_per_key=burst))
    client = await aiohttp_client(app)
    response = await client.post("/shepherd/login_user/", json={"apikey": app[CREATED_KEYS]["pend"],
                                                                 "acting": "client", "n_envs": 1})
    assert response.status == 200, await response.text()  # the login costs one
    return client, await response.json()


async def test_an_upload_costs_its_t_times_n_environment_steps(aiohttp_client, tmp_path):
    client, opened = await open_session(aiohttp_client, tmp_path, burst=1 + 2 * T)
    key, version, rng = opened["session_key"], opened["policy_version"], np.random.default_rng(0)
    assert opened["steps"] == T
    statuses = []
    for seq in range(1, 4):
        response = await client.post("/shepherd/experience/",
                                     json={"session_key": key, **block(T, version, seq, 0.5, rng)})
        statuses.append(response.status)
        if response.status == 200:
            version = (await response.json())["policy_version"]
    assert statuses == [200, 200, 429]  # 1 + 64 + 64 steps taken: the third block finds the bucket empty


async def test_a_policy_fetch_answered_with_the_file_is_counted_and_a_304_is_not(aiohttp_client, tmp_path):
    client, opened = await open_session(aiohttp_client, tmp_path, burst=1 + T)
    key, version = opened["session_key"], opened["policy_version"]
    first = await client.post("/shepherd/policy/", json={"session_key": key})
    assert first.status == 200  # costs T x N: the bucket is empty now
    for _ in range(3):  # the cheap check of the file held stays free
        held = await client.post("/shepherd/policy/", json={"session_key": key, "policy_version": version})
        assert held.status == 304
    again = await client.post("/shepherd/policy/", json={"session_key": key})
    assert again.status == 429, await again.text()
    assert "Retry-After" in again.headers
