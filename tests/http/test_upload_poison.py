"""Uploads that must not fail a pooled agent for its other clients (issue 48, H1): samples no policy file could
have drawn are refused (400 naming ``sample[t][i]``), and an update an upload would make NaN is refused with it,
the agent's parameters as before and its learner healthy; and a reward over the bound is refused with its exact
value (L13)."""

from __future__ import annotations

import numpy as np
import pytest

from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app

T = 64


def pendulum(algorithm: str = "PPO", parameters: dict | None = None) -> GraphManager:
    """The issue's agent: a Box action of [-2, 2], n_steps 64 (one env per rollout)."""
    parameters = parameters or {"n_envs": 1, "n_steps": T, "batch_size": 64, "n_epochs": 10, "seed": 0}
    return GraphManager(owner="tests", agents=[AgentSpec("pend", algorithm, [[3], "-inf", "inf"], [[1], -2, 2],
                                                         parameters)],
                        schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=5))


async def open_session(aiohttp_client, tmp_path, graph: GraphManager | None = None):
    app = create_app(ServerConfig(graph or pendulum(), tmp_path / "data"))
    client = await aiohttp_client(app)
    client.apikey = app[CREATED_KEYS]["pend"]
    response = await client.post("/shepherd/login_user/", json={"apikey": client.apikey, "acting": "client",
                                                                 "n_envs": 1})
    assert response.status == 200, await response.text()
    return client, await response.json()


def block(steps: int, version: int, seq: int, sample: float, rng: np.random.Generator) -> dict:
    """One env's ``steps`` steps with every sample at +-``sample`` (alternating)."""
    return {"seq": seq, "policy_version": version, "obs": rng.normal(size=(steps + 1, 1, 3)).tolist(),
            "sample": [[[sample * (-1) ** t]] for t in range(steps)], "reward": rng.normal(size=(steps, 1)).tolist(),
            "terminated": [[False]] * steps, "truncated": [[False]] * steps}


async def health(client) -> dict:
    return await (await client.get("/shepherd/health")).json()


@pytest.mark.parametrize("sample, uploads", [(1e4, 2), (3e38, 1)])
async def test_uploads_of_samples_no_policy_could_draw_are_refused_and_the_agent_stays_healthy(
        aiohttp_client, tmp_path, sample, uploads):
    client, opened = await open_session(aiohttp_client, tmp_path)
    key, version, rng = opened["session_key"], opened["policy_version"], np.random.default_rng(0)
    for seq in range(1, uploads + 1):
        response = await client.post("/shepherd/experience/",
                                     json={"session_key": key, **block(opened["steps"], version, seq, sample, rng)})
        assert response.status == 400, await response.text()
        assert "sample[0][0]" in (await response.json())["error"]
    assert (await health(client))["agents"]["failed"] == 0
    learner = client.app[GRAPH].runtime().learner
    assert learner.failure is None
    # the session's reservation stayed: its honest block is learned, the agent updated
    response = await client.post("/shepherd/experience/", json={
        "session_key": key, **block(opened["steps"], version, uploads + 1, 0.5, rng)})
    assert response.status == 200, await response.text()
    assert (await response.json())["policy_version"] == version + 1 and learner.failure is None


async def test_an_update_an_upload_makes_nan_is_undone_and_the_upload_refused_409(aiohttp_client, tmp_path,
                                                                                   monkeypatch):
    """The issue's uploads of +-1e4 with the bound on samples lifted reach the update, which goes NaN: it is
    undone (every parameter as before), the upload that completed the rollout is refused as a stale one is,
    and the agent goes on serving and learning."""
    from shepherd.agents.sb3 import uploads

    monkeypatch.setattr(uploads, "GAUSSIAN_DRAW_LIMIT", np.inf)
    client, opened = await open_session(aiohttp_client, tmp_path)
    key, version, rng = opened["session_key"], opened["policy_version"], np.random.default_rng(0)
    learner = client.app[GRAPH].runtime().learner
    refused = None
    for seq in range(1, 6):
        policy = {k: v.clone() for k, v in learner.algorithm.model.policy.state_dict().items()}
        response = await client.post("/shepherd/experience/",
                                     json={"session_key": key, **block(opened["steps"], version, seq, 1e4, rng)})
        if response.status != 200:
            refused = response
            break
        version = (await response.json())["policy_version"]
    assert refused is not None and refused.status == 409, await refused.text()
    body = await refused.json()
    assert body["policy_version"] == version and "NaN or infinite" in body["error"] and "undone" in body["error"]
    after = learner.algorithm.model.policy.state_dict()
    assert all(bool((after[k] == v).all()) for k, v in policy.items())  # the parameters as before the update
    assert learner.failure is None and (await health(client))["agents"]["failed"] == 0
    assert learner.algorithm.refused_updates == 1
    response = await client.post("/shepherd/experience/",
                                 json={"session_key": key, **block(opened["steps"], version, seq + 1, 0.5, rng)})
    assert response.status == 200, await response.text()
    assert (await response.json())["policy_version"] == version + 1 and learner.failure is None


@pytest.mark.parametrize("algorithm, actions", [("DQN", 2), ("QRDQN", 2), ("SAC", [[1], -2, 2]), ("TD3", [[1], -2, 2]),
                                                ("DDPG", [[1], -2, 2]), ("TQC", [[1], -2, 2]), ("CrossQ", [[1], -2, 2])])
async def test_observations_that_overflow_the_networks_are_refused_and_the_agent_stays_healthy(
        aiohttp_client, tmp_path, algorithm, actions):
    """An unbounded Box observation of 3e38 (finite, so the wire takes it) makes the networks' outputs NaN: one
    such upload failed a DQN or SAC agent at its first update. Refused 400 naming it, before it enters the
    replay buffer; then an honest block is learned. (PPO's tanh layers saturate: it learns from such a block.)"""
    parameters = {"learning_starts": 0, "train_freq": 4, "batch_size": 4, "buffer_size": 1000, "seed": 0}
    graph = GraphManager(owner="tests", agents=[AgentSpec("pend", algorithm, [[3], "-inf", "inf"], actions,
                                                          parameters)],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=5))
    client, opened = await open_session(aiohttp_client, tmp_path, graph)
    key, version, steps = opened["session_key"], opened["policy_version"], opened["steps"]
    rng = np.random.default_rng(0)
    learner = client.app[GRAPH].runtime().learner

    def honest(seq: int) -> dict:
        body = block(steps, version, seq, 0.0, rng)
        if algorithm in ("DQN", "QRDQN"):
            body["sample"] = [[1]] * steps
        return body

    for seq in range(1, 4):
        body = honest(seq)
        body["obs"][1][0] = [3e38, -3e38, 3e38]
        response = await client.post("/shepherd/experience/", json={"session_key": key, **body})
        assert response.status == 400, await response.text()
        assert "obs[1][0]" in (await response.json())["error"]
    assert learner.failure is None and (await health(client))["agents"]["failed"] == 0
    response = await client.post("/shepherd/experience/", json={"session_key": key, **honest(4)})
    assert response.status == 200, await response.text()
    assert (await response.json())["policy_version"] == version + 1 and learner.failure is None


@pytest.mark.parametrize("algorithm, actions", [("DQN", 2), ("SAC", [[1], -2, 2])])
async def test_an_off_policy_update_an_upload_makes_nan_is_undone_and_its_transitions_leave_the_buffer(
        aiohttp_client, tmp_path, monkeypatch, algorithm, actions):
    """With the check of observations lifted, the 3e38 observation enters the replay buffer and the update it
    makes due goes NaN: undone, the upload refused 409 and its transitions taken out of the buffer."""
    from shepherd.agents.sb3 import replay_uploads

    monkeypatch.setattr(replay_uploads, "_check_outputs", lambda adapter, experience: None)
    parameters = {"learning_starts": 0, "train_freq": 4, "batch_size": 4, "buffer_size": 1000, "seed": 0}
    graph = GraphManager(owner="tests", agents=[AgentSpec("pend", algorithm, [[3], "-inf", "inf"], actions,
                                                          parameters)],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=5))
    client, opened = await open_session(aiohttp_client, tmp_path, graph)
    key, version, steps = opened["session_key"], opened["policy_version"], opened["steps"]
    rng = np.random.default_rng(0)
    learner = client.app[GRAPH].runtime().learner
    adapter = learner.algorithm
    before = {k: v.clone() for k, v in adapter.model.policy.state_dict().items()}
    body = block(steps, version, 1, 0.0, rng)
    if algorithm == "DQN":
        body["sample"] = [[1]] * steps
    body["obs"][1][0] = [3e38, -3e38, 3e38]
    response = await client.post("/shepherd/experience/", json={"session_key": key, **body})
    assert response.status == 409, await response.text()
    assert "undone" in (await response.json())["error"] and (await response.json())["policy_version"] == version
    assert adapter._replay.size() == 0 and adapter._replay.pos == 0 and not adapter._replay.full
    after = adapter.model.policy.state_dict()
    assert all(bool((after[k] == v).all()) for k, v in before.items())
    assert learner.failure is None and (await health(client))["agents"]["failed"] == 0
    body = block(steps, version, 2, 0.0, rng)
    if algorithm == "DQN":
        body["sample"] = [[1]] * steps
    response = await client.post("/shepherd/experience/", json={"session_key": key, **body})
    assert response.status == 200, await response.text()
    assert (await response.json())["policy_version"] == version + 1 and adapter._replay.size() == steps


async def test_a_reward_just_over_the_bound_is_refused_with_its_exact_value_and_the_bound(aiohttp_client, tmp_path):
    """Issue 48, L13: 1000001 was refused as "1e+06 ... beyond ... 1e+06"."""
    client, opened = await open_session(aiohttp_client, tmp_path)
    body = block(opened["steps"], opened["policy_version"], 1, 0.5, np.random.default_rng(0))
    body["reward"][3][0] = 1000001
    response = await client.post("/shepherd/experience/", json={"session_key": opened["session_key"], **body})
    assert response.status == 400
    error = (await response.json())["error"]
    assert "reward[3][0] is 1000001, beyond this server's bound of 1000000 " in error, error
    other = await client.post("/shepherd/login_user/", json={"apikey": client.apikey})
    key = (await other.json())["session_key"]
    step = await client.post("/shepherd/env/", json={"session_key": key, "obs": [0.0] * 3, "reward": -1000000.5})
    assert step.status == 400 and "is -1000000.5, beyond this server's bound of 1000000 " in (await step.json())["error"]
