"""Action masks over HTTP (docs/protocol.md, "Action masks"): a MaskablePPO, DQN or QR-DQN agent never answers a
masked-out action, in training and in evaluation, in single and vector sessions; a mask it cannot take is refused with
400 and nothing is recorded."""

import numpy as np
import pytest

from shepherd.agents import parameters as agent_parameters
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app
from tests.binary_bodies import ENCODINGS, request

OBS = [[3], "-inf", "inf"]


def graph_manager(algorithm="MaskablePPO", actions=4, evaluation_every=10 ** 6):
    parameters = {"n_envs": 2, "n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0}
    heatup = 0
    if algorithm in ("DQN", "QRDQN"):
        parameters = {"seed": 0, "train_freq": 4, "batch_size": 16}
        if algorithm == "QRDQN":
            parameters["policy_kwargs"] = {"n_quantiles": 5}
        heatup = 20
    known = agent_parameters(algorithm)
    parameters = {name: value for name, value in parameters.items() if name in known}
    return GraphManager(owner="tests", agents=[AgentSpec("grid", algorithm, OBS, actions, parameters)],
                        schedule=Schedule(steps_between_evaluation_periods=evaluation_every, evaluation_episodes=1,
                                          heatup_steps=heatup))


async def make_client(aiohttp_client, tmp_path, graph):
    app = create_app(ServerConfig(graph, tmp_path / "data", max_envs_per_session=8))
    client = await aiohttp_client(app)
    client.apikey = app[CREATED_KEYS]["grid"]
    return client


async def login(client, **extra):
    response = await client.post("/shepherd/login_user/", json={"apikey": client.apikey, **extra})
    assert response.status == 200, await response.text()
    reply = await response.json()
    client.takes_masks = reply.get("action_masks")
    return reply["session_key"]


async def step(client, key, obs, reward=0.0, encoding="json", **extra):
    body = {"session_key": key, "obs": obs, "reward": reward, **extra}
    return await client.post("/shepherd/env/", **request(body, encoding))


async def expect_error(response, status, words):
    assert response.status == status, await response.text()
    reply = await response.json()
    assert set(reply) == {"error"} and words in reply["error"], reply


def random_mask(rng, groups):
    """A random mask that leaves at least one choice of each sub-action (group) allowed."""
    mask = []
    for width in groups:
        part = rng.random(width) < 0.4
        part[rng.integers(width)] = True
        mask += part.tolist()
    return mask


@pytest.mark.parametrize("algorithm, actions, groups", [
    ("MaskablePPO", 4, [4]), ("MaskablePPO", ["MultiDiscrete", [3, 2]], [3, 2]),
    ("MaskablePPO", ["MultiBinary", 2], [2, 2]), ("DQN", 4, [4]), ("QRDQN", 4, [4])])
async def test_a_masked_agent_never_answers_a_masked_out_action(aiohttp_client, tmp_path, algorithm, actions, groups):
    client = await make_client(aiohttp_client, tmp_path, graph_manager(algorithm, actions, evaluation_every=40))
    runtime = client.server.app[GRAPH].runtime()
    rng = np.random.default_rng(0)
    key = await login(client)
    answered = 0
    for t in range(160):  # training rollouts and updates, and evaluation episodes (greedy) every 40 steps
        mask = random_mask(rng, groups)
        done = t % 9 == 8
        response = await step(client, key, rng.normal(size=3).tolist(), 1.0, done=done,
                              **({} if done else {"action_mask": mask}))
        assert response.status == 200, await response.text()
        action = (await response.json())["action"]
        if done:
            assert action is None
            continue
        chosen = np.atleast_1d(action)
        if isinstance(actions, int):
            assert mask[action], (t, mask, action)
        elif actions[0] == "MultiDiscrete":  # the sub-actions' masks are concatenated
            assert mask[chosen[0]] and mask[3 + chosen[1]], (t, mask, action)
        else:  # two per bit: [bit0=0, bit0=1, bit1=0, bit1=1]
            assert all(mask[2 * bit + value] for bit, value in enumerate(chosen)), (t, mask, action)
        answered += 1
    assert answered > 100 and runtime.learner.model._n_updates > 0
    assert runtime.phase_steps, "nothing was recorded"
    evaluated = [p.name for p, n in runtime.phase_episodes.items() if n]
    assert "EVALUATE" in evaluated, evaluated  # greedy episodes were answered under masks too


async def test_vector_steps_take_one_mask_per_env(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path, graph_manager())
    key = await login(client, n_envs=3)
    rng = np.random.default_rng(1)
    for t in range(30):
        masks = [random_mask(rng, [4]) for _ in range(3)]
        response = await client.post("/shepherd/env/", json={
            "session_key": key, "obs": rng.normal(size=(3, 3)).tolist(), "reward": [1.0] * 3,
            "terminated": [False] * 3, "truncated": [False] * 3, "action_mask": masks})
        assert response.status == 200, await response.text()
        actions = (await response.json())["actions"]
        assert all(mask[action] for mask, action in zip(masks, actions)), (masks, actions)


@pytest.mark.parametrize("encoding", ENCODINGS)
async def test_masks_an_agent_cannot_take_are_refused_and_nothing_is_recorded(aiohttp_client, tmp_path, encoding):
    """Refused alike whether the body is all JSON or carries its arrays as binary tensors."""
    client = await make_client(aiohttp_client, tmp_path, graph_manager())
    runtime = client.server.app[GRAPH].runtime()
    key = await login(client)
    assert client.takes_masks is True  # the login reply says so
    assert (await step(client, key, [0.0, 0.0, 0.0], action_mask=[True, True, False, True])).status == 200
    steps = runtime.tracker.steps
    await expect_error(await step(client, key, [0.1, 0.0, 0.0], 1.0, encoding, action_mask=[True, False]), 400,
                       "'action_mask' must be a list of 4 booleans (one per action); got 2 items")
    await expect_error(await step(client, key, [0.1, 0.0, 0.0], 1.0, encoding, action_mask=[False] * 4), 400,
                       "'action_mask' masks out every action: at least one must stay allowed")
    await expect_error(await step(client, key, [0.1, 0.0, 0.0], 1.0, encoding, action_mask=[1, 0, "yes", 1]), 400,
                       "action_mask[2] must be true or false")
    await expect_error(await step(client, key, [0.1, 0.0, 0.0], 1.0, encoding, action_mask=[1, 0, 2, 1]), 400,
                       "action_mask[2] must be true or false")
    vector_key = await login(client, n_envs=2)
    await expect_error(await client.post("/shepherd/env/", **request({
        "session_key": vector_key, "obs": [[0.0] * 3] * 2, "reward": [0.0] * 2, "terminated": [False] * 2,
        "truncated": [False] * 2, "action_mask": [[True] * 4, [False] * 4]}, encoding)), 400,
        "'action_mask[1]' masks out every")
    await expect_error(await client.post("/shepherd/env/", **request({
        "session_key": vector_key, "obs": [[0.0] * 3] * 2, "reward": [0.0] * 2, "terminated": [False] * 2,
        "truncated": [False] * 2, "action_mask": [[True] * 4]}, encoding)), 400, "'action_mask' has 1 items")
    assert runtime.tracker.steps == steps  # nothing recorded
    assert (await step(client, key, [0.1, 0.0, 0.0], 1.0, action_mask=[False, False, True, False])).status == 200
    assert runtime.tracker.steps == steps + 1


@pytest.mark.parametrize("algorithm", ["PPO", "TRPO"])
async def test_an_agent_whose_algorithm_takes_no_masks_refuses_the_field_naming_those_that_do(
        aiohttp_client, tmp_path, algorithm):
    client = await make_client(aiohttp_client, tmp_path, graph_manager(algorithm))
    runtime = client.server.app[GRAPH].runtime()
    key = await login(client)
    assert client.takes_masks is None  # the login reply has no "action_masks"
    assert (await step(client, key, [0.0, 0.0, 0.0])).status == 200
    steps = runtime.tracker.steps
    await expect_error(await step(client, key, [0.1, 0.0, 0.0], 1.0, action_mask=[True] * 4), 400,
                       "this agent's algorithm takes no 'action_mask'; algorithms that do: DQN, QRDQN, MaskablePPO")
    assert runtime.tracker.steps == steps
    assert (await step(client, key, [0.1, 0.0, 0.0], 1.0)).status == 200  # the session goes on


@pytest.mark.parametrize("ending", ["truncated", "terminated"])
async def test_a_time_limits_mask_reaches_the_dqn_target_of_the_last_transition(aiohttp_client, tmp_path, ending):
    """A step that ends an episode at a time limit may carry its observation's mask: DQN's target bootstraps over
    those actions only (the transition's next mask in the replay buffer); a terminal end is not bootstrapped, and
    its mask changes nothing."""
    client = await make_client(aiohttp_client, tmp_path, graph_manager("DQN"))
    runtime = client.server.app[GRAPH].runtime()
    key = await login(client)
    final = [False, True, False, True]
    for t in range(4):
        ends = t == 3
        response = await step(client, key, [0.1 * t, 0.0, 0.0], 1.0, action_mask=final if ends else [True] * 4,
                              **({ending: True} if ends else {}))
        assert response.status == 200, await response.text()
    # the end is told, not asked: the next episode's first step, answered after it, waits for it to be stored
    assert (await step(client, key, [0.0, 0.0, 0.0], 0.0)).status == 200
    buffer = runtime.learner.model.replay_buffer
    assert buffer.pos == 3 and bool(buffer.dones[2, 0]) and bool(buffer.timeouts[2, 0]) == (ending == "truncated")
    assert buffer.next_masks[2, 0].tolist() == final and buffer.next_masks[:2, 0].all()
