"""The deploy server's application through aiohttp's test client: the client protocol answered by an
exported policy (tests/onnx_policies.py), its errors worded as the learning server words them."""

from __future__ import annotations

import asyncio

import numpy as np
import orjson
import pytest
from gymnasium import spaces

from shepherd.deploy.app import LOGIN_THROTTLE, DeployConfig, Sessions, create_app
from shepherd.http import protocol as learning_protocol
from shepherd.policies.onnx import Policy, PolicyError
from shepherd.wire import BadRequest
from tests.binary_bodies import ENCODINGS, request
from tests.onnx_policies import cartpole_controller, linear_box, masked_discrete

KEY = "the-deploy-key"
RNG = np.random.default_rng(1)


@pytest.fixture
def cartpole(tmp_path):
    path, compute = cartpole_controller(tmp_path / "cartpole.onnx", policy_version=3)
    return Policy.load(path), compute


async def _client(aiohttp_client, policy, **options):
    return await aiohttp_client(create_app(DeployConfig(policy, KEY, failed_login_delay_seconds=0, **options)))


async def _post(client, path, body, status=200, encoding="json"):
    response = await client.post(path, **({"data": orjson.dumps(body)} if encoding == "json" else
                                          request(body, encoding)))
    reply = await response.json()
    assert response.status == status, reply
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    return reply


async def _login(client, **extra):
    return await _post(client, "/shepherd/login_user/", {"apikey": KEY, **extra})


async def test_a_session_steps_with_the_policys_actions(aiohttp_client, cartpole):
    policy, compute = cartpole
    client = await _client(aiohttp_client, policy)
    login = await _login(client, mode="train")  # a login asking to train is served in evaluate mode
    assert login["ok"] and login["agent"] == "cartpole" and login["mode"] == "evaluate"
    assert login["observation_space"] == [[4], "-inf", "inf"] and login["action_space"] == 2
    key = login["session_key"]
    observations = RNG.normal(size=(30, 4)).astype(np.float32)
    for obs, expected in zip(observations, compute(observations)):
        reply = await _post(client, "/shepherd/env/", {"session_key": key, "obs": obs.tolist(), "reward": 1.0,
                                                       "done": False, "info": {}})
        assert reply == {"action": int(expected), "policy_version": 3}
    end = {"session_key": key, "obs": [0, 0, 0, 0], "reward": 1.0, "done": True, "info": {}}
    assert await _post(client, "/shepherd/env/", end) == {"action": None}
    assert await _post(client, "/shepherd/env/", {"session_key": key, "obs": None}) == {"ok": True}
    gone = await _post(client, "/shepherd/env/", {**end, "done": False}, 401)
    assert "log in again" in gone["error"]


async def test_a_vector_session_gets_every_envs_action(aiohttp_client, cartpole):
    policy, compute = cartpole
    client = await _client(aiohttp_client, policy)
    login = await _login(client, n_envs=5)
    assert login["n_envs"] == 5
    observations = RNG.normal(size=(5, 4)).astype(np.float32)
    body = {"session_key": login["session_key"], "obs": observations.tolist(), "reward": [0.0] * 5,
            "terminated": [False] * 5, "truncated": [False] * 5}
    reply = await _post(client, "/shepherd/env/", body)
    assert reply == {"actions": compute(observations).tolist(), "policy_version": 3}
    ended = {**body, "terminated": [False, True, False, False, False], "final_obs": [None, [0, 0, 0, 0], None, None, None]}
    assert (await _post(client, "/shepherd/env/", ended))["actions"] == compute(observations).tolist()
    assert await _post(client, "/shepherd/logout/", {"session_key": login["session_key"]}) == {"ok": True}


async def test_a_box_policy_answers_lists(aiohttp_client, tmp_path):
    path, compute = linear_box(tmp_path / "box.onnx", RNG.normal(size=(3, 2)), RNG.normal(size=2), [-1, 0], [1, 2])
    client = await _client(aiohttp_client, Policy.load(path))
    key = (await _login(client))["session_key"]
    obs = [0.5, -1.0, 2.0]
    reply = await _post(client, "/shepherd/env/", {"session_key": key, "obs": obs, "reward": 0, "done": False})
    assert np.allclose(reply["action"], compute(np.array([obs]))[0], atol=1e-6)


async def test_masks_reach_the_policy(aiohttp_client, tmp_path):
    path, compute = masked_discrete(tmp_path / "masked.onnx", RNG.normal(size=(3, 4)), RNG.normal(size=4))
    client = await _client(aiohttp_client, Policy.load(path))
    login = await _login(client)
    assert login["action_masks"] is True  # the login reply says the policy takes them
    key = login["session_key"]
    step = {"session_key": key, "obs": [0.1, 0.2, 0.3], "reward": 0, "done": False}
    for mask in ([1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 1]):
        reply = await _post(client, "/shepherd/env/", {**step, "action_mask": mask})
        assert reply["action"] == compute(np.array([step["obs"]]), np.array([mask], bool))[0]
    refused = await _post(client, "/shepherd/env/", {**step, "action_mask": [1, 0]}, 400)
    assert "action_mask" in refused["error"] and "4" in refused["error"]


@pytest.mark.parametrize("encoding", ENCODINGS)
async def test_bad_steps_get_the_learning_servers_errors(aiohttp_client, cartpole, encoding):
    """Worded as the learning server words them, whether the body is all JSON or carries binary tensors."""
    policy, _ = cartpole
    client = await _client(aiohttp_client, policy)
    login = await _login(client)
    assert "action_masks" not in login
    key = login["session_key"]
    space = spaces.Box(-np.inf, np.inf, (4,), np.float32)
    step = {"session_key": key, "obs": [0.1, 0.2, 0.3, 0.4], "reward": 0.0, "done": False, "info": {}}
    for bad in ({**step, "obs": [0.1, 0.2, 0.3]}, {**step, "obs": "up"}, {**step, "reward": None},
                {**step, "reward": [1.0]}, {**step, "info": 3}, {**step, "seq": -1}):
        error = (await _post(client, "/shepherd/env/", bad, 400, encoding))["error"]
        with pytest.raises(BadRequest) as learning:
            learning_protocol.parse_step(bad, space)
        assert error == str(learning.value)
    assert "obs has shape [3], expected [4]" in (await _post(client, "/shepherd/env/", {**step, "obs": [1, 2, 3]}, 400,
                                                             encoding))["error"]
    unknown = await _post(client, "/shepherd/env/", {**step, "action": 1}, 400, encoding)
    assert "unknown field(s) ['action']" in unknown["error"]
    no_masks = await _post(client, "/shepherd/env/", {**step, "action_mask": [1, 1]}, 400, encoding)
    assert "takes no 'action_mask'" in no_masks["error"]
    vector_key = (await _login(client, n_envs=3))["session_key"]
    vector = {"session_key": vector_key, "obs": [[0.0] * 4] * 3, "reward": [0.0] * 3, "terminated": [False] * 3,
              "truncated": [False] * 3}
    for bad, words in (({**vector, "obs": [[0.0] * 4] * 2}, "'obs' has 2 items; this session drives 3 envs"),
                       ({**vector, "obs": [[0.0] * 4, [0.0] * 5, [0.0] * 4]}, "obs[1] has shape [5], expected [4]"),
                       ({**vector, "terminated": [True, False, False]}, "final_obs[0] is missing"),
                       ({**step, "session_key": vector_key}, "a vector step has no 'done'")):
        assert words in (await _post(client, "/shepherd/env/", bad, 400, encoding))["error"]
    await _post(client, "/shepherd/nothing", {}, 404)


async def test_binary_steps_get_the_actions_of_their_json(aiohttp_client, cartpole):
    policy, compute = cartpole
    client = await _client(aiohttp_client, policy)
    key = (await _login(client, n_envs=5))["session_key"]
    observations = RNG.normal(size=(5, 4)).astype(np.float32)
    body = {"session_key": key, "obs": observations.tolist(), "reward": [0.0] * 5, "terminated": [False] * 5,
            "truncated": [False] * 5}
    reply = await _post(client, "/shepherd/env/", body, encoding="binary")
    assert reply["actions"] == [int(action) for action in compute(observations)]
    cut = request(body, "binary")
    cut["data"] = cut["data"][:-1]
    response = await client.post("/shepherd/env/", **cut)  # a byte short
    assert response.status == 400 and "bytes before its tensors" in (await response.json())["error"]


async def test_logins_are_checked(aiohttp_client, cartpole):
    client = await _client(aiohttp_client, cartpole[0], max_envs_per_session=8, max_sessions=2)
    assert "API key" in (await _post(client, "/shepherd/login_user/", {"apikey": "wrong"}, 401))["error"]
    assert "'apikey'" in (await _post(client, "/shepherd/login_user/", {}, 400))["error"]
    assert "between 1 and 8" in (await _login_status(client, 400, n_envs=9))["error"]
    assert "'mode' must be" in (await _login_status(client, 400, mode="learn"))["error"]
    await _login(client)
    await _login(client)
    response = await client.post("/shepherd/login_user/", data=orjson.dumps({"apikey": KEY}))
    assert response.status == 429 and response.headers["Retry-After"]


async def test_failed_logins_are_throttled_per_address_as_the_learning_server_s(aiohttp_client, cartpole):
    client = await _client(aiohttp_client, cartpole[0])
    throttle = client.app[LOGIN_THROTTLE]
    throttle.base_delay = throttle.max_delay = 1.0
    for _ in range(throttle.free):  # the free failures: answered at once
        await _post(client, "/shepherd/login_user/", {"apikey": "a-guess"}, 401)
    guess = asyncio.ensure_future(client.post("/shepherd/login_user/", data=orjson.dumps({"apikey": "guess"})))
    await asyncio.sleep(0.3)  # that failure blocks the address for 1 s, and its own answer waits as long
    response = await client.post("/shepherd/login_user/", data=orjson.dumps({"apikey": KEY}))
    assert response.status == 429 and response.headers["Retry-After"]  # even the right key: untried
    assert "too many failed attempts from this address" in (await response.json())["error"]
    assert (await guess).status == 401


@pytest.mark.parametrize("argv, environ, words", [
    (["--key", "k" * 40], {}, "not taken on the command line"),
    ([], {"SHEPHERD_DEPLOY_KEY": "short"}, "$SHEPHERD_DEPLOY_KEY must be at least 32 characters"),
    (["--key-file", "KEYFILE"], {}, "must be at least 32 characters"),
    (["--key-file", "NOFILE"], {}, "cannot be read"),
])
def test_a_chosen_key_comes_from_a_file_or_the_environment_and_is_long(tmp_path, capsys, monkeypatch, argv, environ,
                                                                       words):
    from shepherd.deploy import cli

    (tmp_path / "key").write_text("a-weak-key\n")
    argv = [str(tmp_path / "key") if a == "KEYFILE" else str(tmp_path / "none") if a == "NOFILE" else a for a in argv]
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert cli.main([str(tmp_path / "never-read.onnx"), *argv]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


def test_a_chosen_key_of_32_characters_or_more_is_taken(tmp_path, monkeypatch):
    from shepherd.deploy.cli import chosen_key

    (tmp_path / "key").write_text("k" * 40 + "\n")
    assert chosen_key(str(tmp_path / "key"), {}) == "k" * 40
    assert chosen_key(None, {"SHEPHERD_DEPLOY_KEY": "e" * 32}) == "e" * 32
    assert chosen_key(None, {}) is None


async def _login_status(client, status, **extra):
    return await _post(client, "/shepherd/login_user/", {"apikey": KEY, **extra}, status)


async def test_seq_retries_get_the_same_reply(aiohttp_client, cartpole):
    client = await _client(aiohttp_client, cartpole[0])
    key = (await _login(client))["session_key"]
    step = {"session_key": key, "obs": [0.1, 0.2, 0.3, 0.4], "reward": 0.0, "done": False, "seq": 5}
    first = await _post(client, "/shepherd/env/", step)
    assert await _post(client, "/shepherd/env/", {**step, "info": {"x": 1}}) == first
    assert "already sent with another step" in (await _post(client, "/shepherd/env/", {**step, "obs": [0, 0, 0, 1]}, 409))["error"]
    assert "older" in (await _post(client, "/shepherd/env/", {**step, "seq": 4}, 409))["error"]
    await _post(client, "/shepherd/env/", {**step, "seq": 6})


def test_idle_sessions_expire():
    table = Sessions(10)
    old, new = table.open(None), table.open(4)
    old.last_used -= 1000
    assert table.expire(600) == 1 and len(table) == 1
    assert table.get(new.key) is new


async def test_an_image_agents_exported_policy_is_served_from_json_images(aiohttp_client):
    """A CnnPolicy exported by the learning server (uint8 input, channels last): the deploy server answers JSON
    images with SB3's deterministic actions on them, and a pixel out of range gets the learning server's 400."""
    from shepherd.agents import build_learner
    from shepherd.agents.export.export import export_onnx
    from shepherd.wire.spaces import parse_space

    learner = build_learner("PPO", "eyes", parse_space(["Image", [36, 36, 3]]), parse_space(4), {"seed": 0}, None)
    policy = Policy.from_bytes(export_onnx(learner.algorithm, "eyes", "PPO"))
    client = await _client(aiohttp_client, policy)
    login = await _login(client)
    assert login["observation_space"] == ["Image", [36, 36, 3]]
    images = RNG.integers(0, 256, (8, 36, 36, 3)).astype(np.uint8)
    expected = learner.algorithm.model.predict(np.moveaxis(images, -1, -3), deterministic=True)[0]
    for image, action in zip(images, expected):
        reply = await _post(client, "/shepherd/env/", {"session_key": login["session_key"], "obs": image.tolist(),
                                                       "reward": 0.0, "done": False})
        assert reply["action"] == int(action)
    bad = images[0].tolist()
    bad[1][2][0] = 300
    reply = await _post(client, "/shepherd/env/", {"session_key": login["session_key"], "obs": bad, "reward": 0.0,
                                                   "done": False}, 400)
    assert reply == {"error": "obs[1][2][0] is 300, outside 0-255"}


async def test_an_observation_that_overflows_the_network_is_a_400_not_a_null_action(aiohttp_client):
    """3e38 is a float32 the checks accept; through SAC's ReLU network it makes the action NaN, which orjson
    writes as null: the reply was 200 with `"action": [null, null]`, outside the action space."""
    from shepherd.agents import build_learner
    from shepherd.agents.export.export import export_onnx
    from shepherd.wire.spaces import parse_space

    learner = build_learner("SAC", "a", parse_space([[3], "-inf", "inf"]), parse_space([[2], -2, 3]), {"seed": 0},
                            None)
    policy = Policy.from_bytes(export_onnx(learner.algorithm, "a", "SAC"))
    client = await _client(aiohttp_client, policy)
    key = (await _login(client))["session_key"]
    huge = {"session_key": key, "obs": [3e38, 3e38, -3e38], "reward": 0.0, "done": False}
    refused = await _post(client, "/shepherd/env/", huge, 400)
    assert "NaN or infinite" in refused["error"] and refused["error"].startswith("obs makes")
    assert (await _post(client, "/shepherd/env/", {**huge, "obs": [0.5, 0.1, -0.2]}))["action"][0] is not None
    with pytest.raises(PolicyError, match=r"observations\[1\] makes"):
        policy.act_batch([[0.5, 0.1, -0.2], [3e38, 3e38, -3e38]])
