"""Bounded waits, idempotent retries, limits and secrets, through the real app (``aiohttp_client``)."""

import asyncio
import dataclasses
import gc
import time
import tracemalloc

import aiohttp
import pytest

from shepherd.graph import AgentSpec, GraphManager, Schedule, Session
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app
from shepherd.http.state import CREATED_ADMIN_TOKEN, LOGIN_THROTTLE
from shepherd.level import LevelManager

OBS4 = [0.01, -0.02, 0.03, 0.04]


def graph_manager(**params):
    return GraphManager(
        owner="tests",
        agents=[AgentSpec("pole", "PPO", [[4], "-inf", "inf"], 2,
                          {"n_envs": 2, "n_steps": 4, "batch_size": 8, "n_epochs": 1, "seed": 0, **params})],
        schedule=Schedule())


@pytest.fixture
def make_client(aiohttp_client, tmp_path):
    async def make(params=None, **config):
        app = create_app(ServerConfig(graph_manager(**(params or {})), tmp_path / "data", **config))
        client = await aiohttp_client(app)
        client.apikey = app[CREATED_KEYS]["pole"]
        client.graph = app[GRAPH]
        return client
    return make


async def login(client):
    response = await client.post("/shepherd/login_user/", json={"apikey": client.apikey})
    assert response.status == 200, await response.text()
    return (await response.json())["session_key"]


async def step(client, key, seq=None, reward=1.0, done=False):
    body = {"session_key": key, "obs": OBS4, "reward": reward, "done": done, "info": {}}
    if seq is not None:
        body["seq"] = seq
    return await client.post("/shepherd/env/", json=body)


async def test_a_retried_step_gets_the_same_action_and_counts_once(make_client):
    client = await make_client()
    key = await login(client)
    actions = [(await (await step(client, key, seq)).json())["action"] for seq in range(1, 4)]
    runtime = client.graph.runtime()
    assert runtime.tracker.steps == 2
    again = await step(client, key, seq=3)
    assert (await again.json())["action"] == actions[-1] and runtime.tracker.steps == 2
    stale = await step(client, key, seq=2)
    assert stale.status == 409 and "older" in (await stale.json())["error"]
    done = await step(client, key, seq=4, done=True)
    assert await done.json() == {"action": None}
    assert await (await step(client, key, seq=4, done=True)).json() == {"action": None}
    assert runtime.episodes == 1 and runtime.tracker.steps == 3


async def test_the_same_seq_with_another_step_is_a_conflict(make_client):
    client = await make_client()
    key = await login(client)
    for seq in (1, 2):
        assert (await step(client, key, seq)).status == 200
    runtime = client.graph.runtime()
    other_reward = await step(client, key, seq=2, reward=0.5)
    assert other_reward.status == 409 and "another step" in (await other_reward.json())["error"]
    other_end = await step(client, key, seq=2, done=True)
    assert other_end.status == 409
    assert (await step(client, key, seq=2)).status == 200 and runtime.tracker.steps == 1  # the true retry


async def test_a_step_without_seq_keeps_the_last_seq_so_an_older_step_sent_again_is_no_new_step(make_client):
    """seq 1, seq 2, a step without seq, then seq 2 sent again: it was taken as a new step (counted twice), the
    step without seq having erased the session's last seq."""
    client = await make_client()
    key = await login(client)
    for seq in (1, 2):
        assert (await step(client, key, seq)).status == 200
    assert (await step(client, key, reward=0.5)).status == 200  # no seq
    runtime = client.graph.runtime()
    assert runtime.tracker.steps == 2
    again = await step(client, key, seq=2)
    assert again.status == 409 and runtime.tracker.steps == 2
    assert (await step(client, key, seq=3)).status == 200 and runtime.tracker.steps == 3


async def test_a_step_waiting_past_the_act_timeout_gets_503_and_its_retry_the_action(make_client):
    client = await make_client(act_timeout_seconds=0.3)
    waiter, holder = await login(client), await login(client)
    assert (await step(client, holder, 1)).status == 200  # the holder takes segment 1 and stays there
    for seq in range(1, 6):  # the waiter fills segment 0: 4 transitions, then needs a new segment
        response = await step(client, waiter, seq)
        if seq < 5:
            assert response.status == 200
    assert response.status == 503 and response.headers["Retry-After"] == "1"
    assert "same seq" in (await response.json())["error"]
    other = await step(client, waiter, seq=6)  # not before the waiting one is answered
    assert other.status == 409 and "retry it with seq 5" in (await other.json())["error"]
    for seq in range(2, 6):  # the holder fills segment 1: the rollout is complete, PPO updates
        assert (await step(client, holder, seq)).status == 200
    retried = await step(client, waiter, seq=5)
    assert retried.status == 200 and (await retried.json())["action"] in (0, 1)
    assert client.graph.runtime().learner.model._n_updates == 1


async def test_requests_over_the_rate_limit_of_a_key_get_429_with_retry_after(make_client):
    client = await make_client(requests_per_second_per_key=2, burst_per_key=4)
    key = await login(client)  # the login is the first request of the key
    statuses = [(await step(client, key, seq)).status for seq in range(1, 6)]
    assert statuses[:3] == [200, 200, 200] and 429 in statuses[3:]
    refused = await step(client, key, seq=9)
    assert refused.status == 429 and int(refused.headers["Retry-After"]) >= 1
    assert "too many requests" in (await refused.json())["error"]


async def test_a_login_over_the_rate_limit_is_refused_before_a_session_is_opened(make_client):
    client = await make_client(requests_per_second_per_key=0.001, burst_per_key=2)
    await login(client)
    await login(client)
    for _ in range(3):
        response = await client.post("/shepherd/login_user/", json={"apikey": client.apikey})
        assert response.status == 429 and "too many requests" in (await response.json())["error"]
    assert len(client.graph.sessions) == 2 and client.graph.runtime().sessions == 2  # none for the 429s


async def test_an_agent_has_at_most_max_sessions(make_client):
    client = await make_client(max_sessions_per_agent=2)
    first = await login(client)
    await login(client)
    response = await client.post("/shepherd/login_user/", json={"apikey": client.apikey})
    assert response.status == 429 and response.headers["Retry-After"]
    assert "maximum of 2 sessions" in (await response.json())["error"]
    await client.post("/shepherd/logout/", json={"session_key": first})
    await login(client)


async def test_repeated_failed_logins_from_one_address_are_slowed_down(make_client):
    client = await make_client()
    throttle = client.server.app[LOGIN_THROTTLE]
    throttle.free, throttle.base_delay = 2, 0.2
    for _ in range(3):
        response = await client.post("/shepherd/login_user/", json={"apikey": "guess"})
        assert response.status == 401
    assert throttle._failures["127.0.0.1"].count == 3  # the third was answered only once its block ended
    await login(client)  # the right key still logs in, and forgives nothing
    assert throttle._failures["127.0.0.1"].count == 3


async def test_failed_credentials_block_an_address_for_parallel_requests_bearer_tokens_and_sign_ins(make_client):
    client = await make_client()
    throttle = client.server.app[LOGIN_THROTTLE]
    throttle.free, throttle.base_delay = 2, 600.0  # the third failure blocks the address for the whole test
    for _ in range(2):
        assert (await client.post("/shepherd/login_user/", json={"apikey": "guess"})).status == 401
    await login(client)  # a good login between does not reset the count
    api = "/shepherd/admin/api/whoami"
    guesses = await asyncio.gather(*(client.get(api, headers={"Authorization": f"Bearer guess-{i}"})
                                     for i in range(10)))  # in parallel: one is tried, the rest are not
    statuses = sorted(response.status for response in guesses)
    assert statuses == [401] + [429] * 9
    assert all(int(r.headers["Retry-After"]) > 1 for r in guesses if r.status == 429)
    admin_token = client.server.app[CREATED_ADMIN_TOKEN]
    blocked = [await client.get(api, headers={"Authorization": f"Bearer {admin_token}"}),
               await client.post("/shepherd/admin/api/signin", json={"token": admin_token}),
               await client.post("/shepherd/login_user/", json={"apikey": client.apikey})]
    for response in blocked:  # even the right credentials wait out the block, untried
        assert response.status == 429 and "failed attempts" in (await response.json())["error"]
    assert throttle._failures["127.0.0.1"].count == 3  # refused attempts are not counted


async def test_an_oversized_body_is_refused_from_its_declared_length_before_it_is_read(make_client):
    client = await make_client(max_body_bytes=1000)
    reader, writer = await asyncio.open_connection(client.server.host, client.server.port)
    writer.write(b"POST /shepherd/env/ HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100000000\r\n\r\n{")  # announces 100 MB, sends one byte
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 10)
    assert b" 413 " in status_line
    writer.close()


async def test_a_step_whose_session_ends_while_it_waits_gets_401(make_client):
    client = await make_client()
    waiter, holder = await login(client), await login(client)
    assert (await step(client, holder, 1)).status == 200
    for seq in range(1, 5):
        assert (await step(client, waiter, seq)).status == 200
    waiting = asyncio.create_task(step(client, waiter, 5))  # waits for a free segment ...
    await asyncio.sleep(0.3)
    assert not waiting.done()
    assert (await client.post("/shepherd/logout/", json={"session_key": waiter})).status == 200
    response = await asyncio.wait_for(waiting, 10)  # ... until its session ends
    assert response.status == 401 and "log in again" in (await response.json())["error"]


async def test_secrets_are_never_echoed_in_errors(make_client):
    client = await make_client()
    key = await login(client)
    for body in ({"apikey": client.apikey, "session_key": key}, {"apikey": client.apikey + "x"},
                 {"session_key": client.apikey, "obs": OBS4}, {"session_key": key, "obs": [client.apikey]}):
        path = "/shepherd/login_user/" if "apikey" in body else "/shepherd/env/"
        response = await client.post(path, json=body)
        text = await response.text()
        assert response.status in (400, 401) and client.apikey not in text and key not in text


async def test_hundreds_of_vanishing_clients_leave_nothing_behind(make_client):
    # 64 segments: each vanishing session leaves a partial segment; a session finding none free waits until
    # the idle sweep ends the vanished sessions holding them (1 s idle: a live session's requests are ms apart)
    client = await make_client({"n_envs": 64}, session_idle_seconds=1.0, sweep_seconds=0.1)
    runtime = client.graph.runtime()
    url = str(client.make_url("/shepherd/"))

    async def vanish(http):  # log in, play two steps, disappear without a word
        async with http.post(url + "login_user/", json={"apikey": client.apikey}) as response:
            key = (await response.json())["session_key"]
        for seq in range(1, 3):
            body = {"session_key": key, "obs": OBS4, "reward": 1.0, "done": False, "seq": seq}
            async with http.post(url + "env/", json=body) as response:
                assert response.status == 200

    async def wave(count):  # not the test client, which keeps every response; closed connections
        async with aiohttp.ClientSession() as http:
            for _ in range(count // 30):
                await asyncio.gather(*(vanish(http) for _ in range(30)))
        await _settle(client, runtime)

    await wave(120)  # warm-up: caches, buffers, the first update
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    await wave(240)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    gc.collect()
    alive = [o for o in gc.get_objects() if type(o) in (Session, LevelManager)]
    assert not alive, f"{len(alive)} sessions or level managers are still referenced"
    ignore = [tracemalloc.Filter(False, "<frozen importlib._bootstrap*>")]
    grown = sum(stat.size_diff for stat in after.filter_traces(ignore).compare_to(before.filter_traces(ignore),
                                                                                  "filename"))
    assert len(client.graph.sessions) == 0 and runtime.sessions == 0
    assert runtime.learner.model._n_updates >= 1  # the partial segments were closed and learned from
    # none of them is referenced any more (above); what remains is spread thin over asyncio's and
    # torch's caches, a few kB per source, well under what 240 live sessions would hold
    assert grown < 300_000, f"{grown} bytes still held after 240 vanished sessions"


async def _settle(client, runtime):
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        if len(client.graph.sessions) == 0 and not runtime.learner.algorithm._actors:
            return
    raise AssertionError("sessions or learner actors were not released")


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ServerConfig(graph_manager(), "x").act_timeout_seconds = 1


async def test_a_failed_learner_fails_only_its_agent_and_says_why(aiohttp_client, tmp_path):
    graph = GraphManager(owner="tests", schedule=Schedule(), agents=[
        AgentSpec(name, "PPO", [[4], "-inf", "inf"], 2, {"n_envs": 1, "n_steps": 4, "batch_size": 4})
        for name in ("sick", "well")])
    app = create_app(ServerConfig(graph, tmp_path / "data"))
    client = await aiohttp_client(app)
    keys = app[CREATED_KEYS]
    sick = graph.runtime("sick")

    def explode(*args, **kwargs):  # a fault of the learner (an update that only goes NaN is undone instead)
        raise RuntimeError("the loss is NaN")

    sick.learner.model.train = explode
    sessions = {}
    for name in ("sick", "well"):
        client.apikey = keys[name]
        sessions[name] = await login(client)
    statuses = [(await step(client, sessions["sick"], seq)).status for seq in range(1, 7)]
    assert statuses[:4] == [200] * 4 and statuses[-1] == 503  # the 5th step completes a rollout: boom
    reply = await step(client, sessions["sick"], 9)
    assert reply.status == 503 and "RuntimeError: the loss is NaN" in (await reply.json())["error"]
    assert sick.stats().phase == "failed" and "the loss is NaN" in sick.stats().failure
    for seq in range(1, 20):  # the other agent serves on, trains, and is not touched
        assert (await step(client, sessions["well"], seq)).status == 200
    assert graph.runtime("well").learner.failure is None and graph.runtime("well").learner.model._n_updates >= 3
    client.apikey = keys["sick"]  # a failed agent refuses new sessions, saying why
    refused = await client.post("/shepherd/login_user/", json={"apikey": keys["sick"]})
    assert refused.status == 503 and "the loss is NaN" in (await refused.json())["error"]


async def test_failed_checkpoint_writes_are_retried_and_never_fail_the_agent(aiohttp_client, tmp_path, monkeypatch):
    from shepherd.agents import checkpoint

    graph = GraphManager(owner="tests", agents=[AgentSpec("pole", "PPO", [[4], "-inf", "inf"], 2, {
        "n_envs": 1, "n_steps": 4, "batch_size": 4, "n_epochs": 1, "seed": 0})],
        schedule=Schedule(checkpoint_every_steps=5))
    app = create_app(ServerConfig(graph, tmp_path / "data"))
    client = await aiohttp_client(app)
    client.apikey = app[CREATED_KEYS]["pole"]
    runtime = graph.runtime()
    real_write = checkpoint.write
    folder = str((tmp_path / "data").resolve())

    def full_disk(path, *args):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(checkpoint, "write", full_disk)
    key = await login(client)
    for seq in range(1, 40):  # several checkpoints come due and fail: the agent learns on
        assert (await step(client, key, seq)).status == 200
    await asyncio.sleep(0.2)
    assert runtime.checkpoints.failures >= 1 and runtime.learner.failure is None
    assert runtime.learner.model._n_updates >= 1 and not runtime.model_path.exists()
    runtime.checkpoints._retry_at = 0.0  # the retry is due (its back-off is seconds long)
    monkeypatch.setattr(checkpoint, "write", real_write)
    for seq in range(40, 44):
        assert (await step(client, key, seq)).status == 200
    deadline = time.monotonic() + 10
    while not runtime.model_path.exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert runtime.model_path.exists() and runtime.checkpoints.failures == 0  # written again, counting reset
    # and a learner's failure that quotes a server file reaches clients without the path
    runtime.learner.failure = f"OSError: [Errno 30] Read-only file system: '{folder}/agents/1/x'"
    refused = await client.post("/shepherd/login_user/", json={"apikey": client.apikey})
    error = (await refused.json())["error"]
    assert refused.status == 503 and "Read-only file system" in error and folder not in error and "<path>" in error


async def test_each_server_checks_rewards_with_its_own_bound(aiohttp_client, tmp_path):
    """``--max-reward`` is carried on the server's settings to each session's checks, not set for the process:
    two servers of one process with other bounds each refuse by their own (single and vector steps)."""
    clients = []
    for bound in (10.0, 1e9):
        app = create_app(ServerConfig(graph_manager(), tmp_path / f"data{bound}", max_reward=bound))
        client = await aiohttp_client(app)
        client.apikey = app[CREATED_KEYS]["pole"]
        clients.append(client)
    for client, expected in zip(clients, (400, 200)):
        key = await login(client)
        assert (await step(client, key, reward=0.0)).status == 200
        assert (await step(client, key, reward=100.0)).status == expected
        response = await client.post("/shepherd/login_user/", json={"apikey": client.apikey, "n_envs": 2})
        vector = (await response.json())["session_key"]
        body = {"session_key": vector, "obs": [OBS4, OBS4], "reward": [0.0, 100.0], "terminated": [False, False],
                "truncated": [False, False]}
        assert (await client.post("/shepherd/env/", json=body)).status == expected


async def test_a_client_sending_huge_rewards_is_refused_and_the_pooled_agent_keeps_learning_for_the_others(
        make_client):
    client = await make_client()
    # the attacker stops stepping with its segment unfilled: the other waits until it is handed over (5 s)
    client.graph.runtime().learner.algorithm.handover_timeout = 0.2
    attacker, other = await login(client), await login(client)
    await step(client, attacker, reward=0.0)
    refused = await step(client, attacker, reward=1e300)
    assert refused.status == 400, await refused.text()
    assert "--max-reward" in (await refused.json())["error"]
    for _ in range(3):  # the attacker's bounded steps and another client's fill rollouts: the agent learns
        for key in (attacker, other):
            assert (await step(client, key, reward=1e5)).status == 200
    for _ in range(8):
        assert (await step(client, other)).status == 200
    runtime = client.graph.runtime()
    assert runtime.learner.failure is None and runtime.learner.policy_version >= 1
