"""The client protocol through the real aiohttp app (``aiohttp_client``): replies and error rules."""

import pytest

from shepherd.agents.core import Kind
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, STORE, ServerConfig, create_app
from tests.binary_bodies import ENCODINGS, request

OBS4 = [0.01, -0.02, 0.03, 0.04]


def graph_manager(**schedule):
    return GraphManager(
        owner="tests",
        agents=[AgentSpec("pole", "PPO", [[4], "-inf", "inf"], 2,
                          {"n_envs": 2, "n_steps": 8, "batch_size": 16, "n_epochs": 1, "seed": 0})],
        schedule=Schedule(**schedule))


@pytest.fixture
async def app_client(aiohttp_client, tmp_path):
    app = create_app(ServerConfig(graph_manager(), tmp_path / "data", max_body_bytes=64 * 1024))
    client = await aiohttp_client(app)
    client.apikey = app[CREATED_KEYS]["pole"]
    return client


async def login(client, **extra):
    response = await client.post("/shepherd/login_user/", json={"apikey": client.apikey, **extra})
    assert response.status == 200
    return await response.json()


async def step(client, key, obs=OBS4, reward=0.0, done=False, **extra):
    return await client.post("/shepherd/env/", json={"session_key": key, "obs": obs, "reward": reward,
                                                     "done": done, "info": {}, **extra})


async def expect_error(response, status, words):
    assert response.status == status
    body = await response.json()
    assert set(body) == {"error"} and words in body["error"], body
    return body


async def test_login_replies_with_the_agent_and_its_spaces(app_client):
    reply = await login(app_client)
    assert reply["ok"] is True and reply["agent"] == "pole"
    assert reply["observation_space"] == [[4], "-inf", "inf"] and reply["action_space"] == 2
    assert len(reply["session_key"]) >= 40


async def test_an_episode_gets_actions_then_null_on_done_and_is_recorded(app_client):
    key = (await login(app_client))["session_key"]
    for _ in range(5):
        response = await step(app_client, key, reward=1.0)
        assert response.status == 200 and (await response.json())["action"] in (0, 1)
    response = await step(app_client, key, reward=1.0, done=True)
    assert await response.json() == {"action": None}
    app = app_client.server.app
    runtime = app[GRAPH].runtime()
    returns = app[STORE].returns(runtime.record.id)
    assert [(r.value, r.length, r.phase) for r in returns] == [(5.0, 5, "train")]
    assert runtime.tracker.steps == 5


async def test_evaluate_mode_is_greedy_and_never_learned_from(app_client):
    key = (await login(app_client, mode="evaluate"))["session_key"]
    actions = set()
    for _ in range(30):
        actions.add((await (await step(app_client, key, reward=1.0)).json())["action"])
    await step(app_client, key, done=True)
    runtime = app_client.server.app[GRAPH].runtime()
    assert runtime.tracker.steps == 0 and runtime.learner.steps == 0
    assert len(actions) == 1  # the same observation always gets the same (greedy) action
    assert app_client.server.app[STORE].returns(runtime.record.id)[0].phase == "deploy"


async def test_logout_and_obs_null_end_the_session(app_client):
    key = (await login(app_client))["session_key"]
    response = await app_client.post("/shepherd/env/", json={"session_key": key, "obs": None})
    assert response.status == 200 and await response.json() == {"ok": True}
    await expect_error(await step(app_client, key), 401, "unknown or expired session")
    key = (await login(app_client))["session_key"]
    assert (await app_client.post("/shepherd/logout/", json={"session_key": key})).status == 200
    await expect_error(await step(app_client, key), 401, "log in again")


@pytest.mark.parametrize("body, status, words", [
    (b"{not json", 400, "not valid JSON"),
    (b'{"apikey": NaN}', 400, "not valid JSON"),
    (b"[1, 2]", 400, "JSON object"),
    (b"{}", 400, "'apikey'"),
    (b'{"apikey": 5}', 400, "'apikey'"),
    (b'{"apikey": "x", "mode": "fast"}', 400, "'mode'"),
    (b'{"apikey": "x", "password": "y"}', 400, "unknown field(s) ['password']"),
    (b'{"apikey": "not-a-key"}', 401, "unknown or revoked API key"),
])
async def test_bad_logins(app_client, body, status, words):
    await expect_error(await app_client.post("/shepherd/login_user/", data=body), status, words)


@pytest.mark.parametrize("change, status, words", [
    ({"obs": [1, 2, 3]}, 400, "shape [3], expected [4]"),
    ({"obs": [[1, 2], [3, 4]]}, 400, "shape [2, 2], expected [4]"),
    ({"obs": [1, 2, 3, "x"]}, 400, "only numbers"),
    ({"obs": "1,2,3,4"}, 400, "list of numbers"),
    ({"obs": [1, 2, 3, 1e39]}, 400, "NaN or infinity"),
    ({"reward": "high"}, 400, "'reward' must be a finite number"),
    ({"reward": 1e999}, 400, "not valid JSON"),
    ({"done": "yes"}, 400, "'done' must be true or false"),
    # the episode went on silently (``done`` won): contradicting flags are refused
    ({"terminated": True}, 400, "'done' is false but 'terminated' is true"),
    ({"truncated": True}, 400, "'done' is false but 'truncated' is true"),
    ({"info": [1]}, 400, "'info' must be an object"),
    ({"action": 1}, 400, "unknown field(s) ['action']"),
    ({"session_key": "nope"}, 401, "unknown or expired session_key"),
    ({"session_key": None}, 400, "'session_key'"),
])
@pytest.mark.parametrize("encoding", ENCODINGS)
async def test_bad_steps_get_the_right_4xx_and_the_session_survives(app_client, change, status, words, encoding):
    """Refused alike whether the body is all JSON or carries its arrays as binary tensors."""
    key = (await login(app_client))["session_key"]
    body = {"session_key": key, "obs": OBS4, "reward": 0.0, "done": False, "info": {}, **change}
    await expect_error(await app_client.post("/shepherd/env/", **request(body, encoding)), status, words)
    response = await step(app_client, key)
    assert response.status == 200 and (await response.json())["action"] in (0, 1)


@pytest.mark.parametrize("missing, words", [
    ("reward", "'reward' (a finite number) is required"),
    ("obs", "'obs' is required"),
])
@pytest.mark.parametrize("encoding", ENCODINGS)
async def test_a_step_without_reward_or_obs_gets_400_naming_it_and_the_session_survives(app_client, missing, words,
                                                                                        encoding):
    key = (await login(app_client))["session_key"]
    assert (await step(app_client, key)).status == 200  # the episode's first step: no reward needed yet
    full = {"session_key": key, "obs": OBS4, "reward": 1.0, "done": False, "info": {}}
    for done in (False, True):  # a middle step and an episode's last step alike
        body = {name: value for name, value in {**full, "done": done}.items() if name != missing}
        await expect_error(await app_client.post("/shepherd/env/", **request(body, encoding)), 400, words)
    if missing == "reward":  # an explicit null is no reward either
        await expect_error(await app_client.post("/shepherd/env/", **request({**full, "reward": None}, encoding)),
                           400, words)
    runtime = app_client.server.app[GRAPH].runtime()
    assert runtime.tracker.steps == 0  # nothing refused was counted, and the session did not end
    response = await step(app_client, key, reward=1.0)
    assert response.status == 200 and (await response.json())["action"] in (0, 1)
    assert runtime.tracker.steps == 1


async def test_an_episode_first_step_needs_a_reward_too_and_the_seed_client_body_works(app_client):
    """The edge cannot tell an episode's first step from the others (that is the session's state), so it
    asks for a reward with every observation; the seed client sends 0.0 with every first observation."""
    key = (await login(app_client))["session_key"]
    first = {"session_key": key, "obs": OBS4, "done": False, "info": {}}
    await expect_error(await app_client.post("/shepherd/env/", json=first), 400, "'reward'")
    for body in ({**first, "reward": 0.0}, {**first, "reward": 1.0}, {**first, "reward": 1.0, "done": True}):
        response = await app_client.post("/shepherd/env/", json=body)  # the seed client's bodies
        assert response.status == 200
    assert await response.json() == {"action": None}


async def test_nan_in_the_body_is_refused(app_client):
    key = (await login(app_client))["session_key"]
    body = ('{"session_key": "%s", "obs": [NaN, 0, 0, 0], "reward": 0, "done": false}' % key).encode()
    await expect_error(await app_client.post("/shepherd/env/", data=body), 400, "NaN and Infinity are not JSON")


async def test_oversized_bodies_unknown_paths_and_methods_are_json_errors(app_client):
    await expect_error(await app_client.post("/shepherd/env/", data=b"x" * 70_000), 413, "too large")
    await expect_error(await app_client.get("/shepherd/nowhere/"), 404, "no such path")
    await expect_error(await app_client.get("/shepherd/env/"), 405, "GET is not allowed")


async def test_a_failed_agent_answers_503_with_retry_after(app_client):
    key = (await login(app_client))["session_key"]
    app_client.server.app[GRAPH].runtime().learner.failure = "RuntimeError: boom"
    response = await step(app_client, key)
    await expect_error(response, 503, "boom")
    assert response.headers["Retry-After"]


async def test_time_limits_reach_the_learner_as_truncation(app_client):
    key = (await login(app_client))["session_key"]
    await step(app_client, key)
    level = app_client.server.app[GRAPH].session(key).level
    calls = []
    real_tell = level.host.learner.tell
    level.host.learner.tell = lambda request: calls.append(request) or real_tell(request)
    response = await step(app_client, key, reward=1.0, done=True, info={"TimeLimit.truncated": True})
    assert await response.json() == {"action": None}
    assert [(request.kind, request.truncated) for request in calls] == [(Kind.END, True)]


async def test_every_action_says_which_policy_version_chose_it(aiohttp_client, tmp_path):
    # evaluation every 32 steps: greedy episodes are answered by the snapshot, training ones by the learner
    app = create_app(ServerConfig(graph_manager(steps_between_evaluation_periods=32, evaluation_episodes=1),
                                  tmp_path / "data"))
    client = await aiohttp_client(app)
    client.apikey = app[CREATED_KEYS]["pole"]
    runtime = app[GRAPH].runtime()
    key = (await login(client))["session_key"]
    versions = []
    for t in range(120):  # PPO with 2 segments of 8 steps, one client: an update every 8 of its steps
        reply = await (await step(client, key, reward=1.0, done=t % 10 == 9)).json()
        if reply["action"] is None:
            assert set(reply) == {"action"}
            continue
        assert set(reply) == {"action", "policy_version"}
        versions.append(reply["policy_version"])
        assert reply["policy_version"] <= runtime.learner.algorithm.version
    assert versions[0] == 0 and versions == sorted(versions) and versions[-1] >= 5, versions
    vector = (await login(client, n_envs=2))["session_key"]
    reply = await (await client.post("/shepherd/env/", json={
        "session_key": vector, "obs": [OBS4, OBS4], "reward": [0.0, 0.0], "terminated": [False, False],
        "truncated": [False, False]})).json()
    assert set(reply) == {"actions", "policy_version"} and reply["policy_version"] >= versions[-1]
