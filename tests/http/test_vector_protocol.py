"""Vector steps through the real aiohttp app: one request steps N envs (docs/protocol.md, "Vector sessions")."""

import asyncio

import numpy as np
import pytest

from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app
from tests.binary_bodies import ENCODINGS, request

N = 4


def obs(i, t=0):
    return [0.01 * i, -0.02 + 0.001 * t, 0.03, 0.04 * i]


def graph_manager(algorithm="PPO", parameters=None):
    parameters = parameters or {"n_envs": N, "n_steps": 8, "batch_size": 16, "n_epochs": 1, "seed": 0}
    return GraphManager(owner="tests", agents=[AgentSpec("pole", algorithm, [[4], "-inf", "inf"], 2, parameters)],
                        schedule=Schedule(steps_between_evaluation_periods=10 ** 6))


async def make_client(aiohttp_client, tmp_path, graph=None, **config):
    app = create_app(ServerConfig(graph or graph_manager(), tmp_path / "data", **config))
    client = await aiohttp_client(app)
    client.apikey = app[CREATED_KEYS]["pole"]
    return client


@pytest.fixture
async def app_client(aiohttp_client, tmp_path):
    return await make_client(aiohttp_client, tmp_path, max_envs_per_session=16)


async def login(client, n_envs=N, **extra):
    response = await client.post("/shepherd/login_user/", json={"apikey": client.apikey, "n_envs": n_envs, **extra})
    assert response.status == 200, await response.text()
    return await response.json()


def body(key, t=0, n=N, ended=(), truncated=(), **extra):
    return {"session_key": key, "obs": [obs(i, t) for i in range(n)], "reward": [0.0 if t == 0 else 1.0] * n,
            "terminated": [i in ended and i not in truncated for i in range(n)],
            "truncated": [i in truncated for i in range(n)],
            "final_obs": [obs(i, 99) if i in ended else None for i in range(n)], **extra}


async def vstep(client, key, t=0, **kwargs):
    return await client.post("/shepherd/env/", json=body(key, t, **kwargs))


async def expect_error(response, status, words):
    assert response.status == status, await response.text()
    reply = await response.json()
    assert set(reply) == {"error"} and words in reply["error"], reply
    return reply


def runtime(client):
    return client.server.app[GRAPH].runtime()


async def test_a_vector_login_echoes_n_envs_and_a_single_login_is_unchanged(app_client):
    reply = await login(app_client)
    assert reply["n_envs"] == N and reply["agent"] == "pole" and reply["action_space"] == 2
    single = await app_client.post("/shepherd/login_user/", json={"apikey": app_client.apikey})
    assert "n_envs" not in await single.json()


async def test_every_env_gets_an_action_and_ended_episodes_are_recorded_per_env(app_client):
    key = (await login(app_client))["session_key"]
    for t in range(6):  # envs 1 and 3 end at t=3 (3 actions each), the others run on
        ended = (1, 3) if t == 3 else ()
        response = await vstep(app_client, key, t, ended=ended, truncated=(3,) if t == 3 else ())
        assert response.status == 200, await response.text()
        reply = await response.json()
        assert set(reply) == {"actions", "policy_version"} and len(reply["actions"]) == N
        assert all(action in (0, 1) for action in reply["actions"])
    state = runtime(app_client)
    assert state.tracker.steps == 5 * N and state.episodes == 2
    returns = state.store.returns(state.record.id)
    assert [(r.value, r.length) for r in returns] == [(3.0, 3), (3.0, 3)]
    response = await app_client.post("/shepherd/env/", json={"session_key": key, "obs": None})
    assert await response.json() == {"ok": True}
    assert runtime(app_client).sessions == 0


BAD_BODIES = [
    (lambda b: b.update(reward=[0.0] * (N - 1)), "'reward' has 3 items; this session drives 4 envs"),
    (lambda b: b.update(obs=b["obs"][:2]), "'obs' has 2 items"),
    (lambda b: b["obs"].__setitem__(2, [1.0, 2.0]), "obs[2]"),
    (lambda b: b["obs"].__setitem__(1, [1.0, 2.0, "x", 4.0]), "obs[1]"),
    (lambda b: b.update(terminated=[False, True, False, False]), "final_obs[1] is missing"),
    (lambda b: b["final_obs"].__setitem__(0, obs(0)), "final_obs[0] is given but env 0 did not end"),
    (lambda b: b["reward"].__setitem__(3, "1"), "reward[3] must be a finite number"),
    (lambda b: b.update(truncated="no"), "'truncated' (a list of 4 booleans"),
    (lambda b: b["terminated"].__setitem__(0, "yes"), "terminated[0] must be true or false"),
    (lambda b: b.update(done=False), "a vector step has no 'done'"),
    (lambda b: b.update(reward=1.0), "this session drives 4 envs"),
    (lambda b: b.update(info=[{}] * 3), "'info' has 3 items"),
]


@pytest.mark.parametrize("change, words", BAD_BODIES)
@pytest.mark.parametrize("encoding", ENCODINGS)
async def test_bad_vector_steps_are_refused_whole_with_400_naming_what_is_wrong(app_client, change, words, encoding):
    """Refused alike whether the body is all JSON or carries its arrays as binary tensors."""
    key = (await login(app_client))["session_key"]
    assert (await vstep(app_client, key, 0)).status == 200
    bad = body(key, 1, ended=())
    change(bad)
    await expect_error(await app_client.post("/shepherd/env/", **request(bad, encoding)), 400, words)
    assert runtime(app_client).tracker.steps == 0  # nothing of the refused step was recorded
    assert (await vstep(app_client, key, 1)).status == 200  # and the session goes on
    assert runtime(app_client).tracker.steps == N


async def test_a_vector_body_on_a_single_session_and_the_reverse_are_refused(app_client):
    single = await app_client.post("/shepherd/login_user/", json={"apikey": app_client.apikey})
    single_key = (await single.json())["session_key"]
    await expect_error(await vstep(app_client, single_key, 0), 400, "this session drives one env")
    key = (await login(app_client))["session_key"]
    response = await app_client.post("/shepherd/env/", json={"session_key": key, "obs": obs(0), "reward": 0.0})
    await expect_error(response, 400, "this session drives 4 envs")


@pytest.mark.parametrize("n_envs, words", [(17, "between 1 and 16"), (0, "at least 1"), ("4", "whole number"),
                                           (True, "whole number"), (2.5, "whole number")])
async def test_bad_n_envs_at_login(app_client, n_envs, words):
    response = await app_client.post("/shepherd/login_user/", json={"apikey": app_client.apikey, "n_envs": n_envs})
    await expect_error(response, 400, words)
    assert runtime(app_client).sessions == 0


async def test_a_retried_vector_step_gets_the_same_actions_and_is_counted_once(app_client):
    key = (await login(app_client))["session_key"]
    assert (await vstep(app_client, key, 0, seq=1)).status == 200
    first = await (await vstep(app_client, key, 1, seq=2)).json()
    again = await (await vstep(app_client, key, 1, seq=2)).json()
    assert first == again and runtime(app_client).tracker.steps == N
    await expect_error(await vstep(app_client, key, 2, seq=2), 409, "already sent with another step")


async def test_the_rate_limit_counts_environment_steps(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path, requests_per_second_per_key=6.0, burst_per_key=6.0)
    key = (await login(client))["session_key"]  # the login took one token: 5 left
    assert (await vstep(client, key, 0)).status == 200  # 4 steps: 1 left
    refused = await vstep(client, key, 1)
    await expect_error(refused, 429, "environment steps/s")
    assert float(refused.headers["Retry-After"]) >= 1


async def test_a_vector_step_larger_than_the_burst_still_passes_on_a_full_bucket(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path, requests_per_second_per_key=1000.0, burst_per_key=2.0)
    key = (await login(client, n_envs=8))["session_key"]
    await asyncio.sleep(0.05)  # the login's token is back: the bucket is full (2), the step costs 8
    response = await client.post("/shepherd/env/", json=body(key, 0, n=8))
    assert response.status == 200, await response.text()


async def test_more_envs_than_rollout_segments_never_stall_and_the_agent_learns(aiohttp_client, tmp_path):
    """8 envs, 2 segments: envs without a segment act unrecorded instead of waiting for their own session."""
    graph = graph_manager(parameters={"n_envs": 2, "n_steps": 8, "batch_size": 16, "n_epochs": 1, "seed": 0})
    client = await make_client(aiohttp_client, tmp_path, graph=graph, act_timeout_seconds=3.0)
    key = (await login(client, n_envs=8))["session_key"]
    for t in range(40):
        response = await vstep(client, key, t, n=8)
        assert response.status == 200, await response.text()  # a stall would be a 503 after 3 s
    learner = runtime(client).learner
    assert learner.algorithm.version >= 4  # 2 segments x 8 rows filled every ~8 steps: trained


async def test_evaluate_mode_vector_steps_give_the_greedy_action_of_each_obs(app_client):
    single = await app_client.post("/shepherd/login_user/", json={"apikey": app_client.apikey, "mode": "evaluate"})
    single_key = (await single.json())["session_key"]
    key = (await login(app_client, mode="evaluate"))["session_key"]
    rows = [list(np.random.default_rng(i).normal(size=4)) for i in range(N)]
    for t in range(3):  # the first step is answered by the learner, the next ones by the greedy snapshot
        response = await app_client.post("/shepherd/env/", json={
            "session_key": key, "obs": rows, "reward": [0.0] * N, "terminated": [False] * N,
            "truncated": [False] * N})
        actions = (await response.json())["actions"]
        for row, action in zip(rows, actions):
            one = await app_client.post("/shepherd/env/", json={"session_key": single_key, "obs": row,
                                                                "reward": 0.0})
            assert (await one.json())["action"] == action
    assert runtime(app_client).tracker.steps == 0  # evaluate mode: nothing learned
