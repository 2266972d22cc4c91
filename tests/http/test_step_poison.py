"""Steps that must not fail a pooled agent for its other clients (issue 48, H1, on the server-acting path): an
off-policy agent refuses an observation its networks cannot take (400 naming it) before it is stored or acted
on, and an on-policy update a rollout makes NaN is undone; either way the agent goes on learning."""

from __future__ import annotations

import numpy as np
import pytest

from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app

AGENTS = {
    "SAC": {"batch_size": 8, "train_freq": 1, "buffer_size": 1000, "seed": 0},
    "DQN": {"batch_size": 8, "train_freq": 1, "buffer_size": 1000, "seed": 0},
    "PPO": {"n_envs": 1, "n_steps": 16, "batch_size": 16, "n_epochs": 2, "seed": 0,
            "policy_kwargs": {"activation_fn": "relu"}},  # SB3's default tanh saturates instead of overflowing
}
POISONED = (5, 20, 40)


def graph(algorithm: str) -> GraphManager:
    action = 2 if algorithm == "DQN" else [[1], -2, 2]
    return GraphManager(owner="tests", agents=[AgentSpec("agent", algorithm, [[3], "-inf", "inf"], action,
                                                         AGENTS[algorithm])],
                        schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=5,
                                          heatup_steps=0 if algorithm == "PPO" else 8))


@pytest.mark.parametrize("algorithm", sorted(AGENTS))
@pytest.mark.parametrize("poison", [3e38, 1e30])
async def test_an_observation_the_networks_cannot_take_does_not_fail_the_agent(aiohttp_client, tmp_path, algorithm,
                                                                               poison):
    app = create_app(ServerConfig(graph(algorithm), tmp_path / "data"))
    client = await aiohttp_client(app)
    login = await client.post("/shepherd/login_user/", json={"apikey": app[CREATED_KEYS]["agent"]})
    key = (await login.json())["session_key"]
    rng = np.random.default_rng(0)
    for t in range(80):
        obs = rng.normal(size=3).tolist()
        if t in POISONED:
            obs[1] = poison
        response = await client.post("/shepherd/env/", json={"session_key": key, "obs": obs, "reward": 0.1,
                                                             "done": t % 25 == 24})
        if t in POISONED and algorithm != "PPO":  # off-policy: refused at the door, nothing recorded
            assert response.status == 400, await response.text()
            assert "'obs'" in (await response.json())["error"]
        else:
            assert response.status == 200, await response.text()
    learner = app[GRAPH].runtime().learner
    assert learner.failure is None and learner.policy_version > 0  # it learned from the other steps
    assert (await (await client.get("/shepherd/health")).json())["agents"]["failed"] == 0
    if algorithm == "PPO":  # its poisoned rollouts' updates were undone, and /metrics counts them
        from prometheus_client.parser import text_string_to_metric_families

        families = {f.name: f for f in text_string_to_metric_families(await (await client.get("/metrics")).text())}
        refused = [s.value for s in families["shepherd_refused_updates"].samples if s.name.endswith("_total")]
        assert refused == [learner.algorithm.refused_updates] and refused[0] >= 1


async def test_a_vector_step_with_one_poisoned_env_is_refused_whole(aiohttp_client, tmp_path):
    app = create_app(ServerConfig(graph("SAC"), tmp_path / "data"))
    client = await aiohttp_client(app)
    login = await client.post("/shepherd/login_user/", json={"apikey": app[CREATED_KEYS]["agent"], "n_envs": 2})
    key = (await login.json())["session_key"]
    response = await client.post("/shepherd/env/", json={"session_key": key, "obs": [[0, 0, 0], [0, 1e30, 0]],
                                                         "reward": [0, 0], "terminated": [False, False],
                                                         "truncated": [False, False]})
    assert response.status == 400, await response.text()
    response = await client.post("/shepherd/env/", json={"session_key": key, "obs": [[0, 0, 0], [0, 1, 0]],
                                                         "reward": [0, 0], "terminated": [False, False],
                                                         "truncated": [False, False]})
    assert response.status == 200, await response.text()
