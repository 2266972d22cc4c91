"""Every algorithm in every space kind it supports, over HTTP: learn a few hundred steps, save, reload, continue.

Parametrised over the registry's list of algorithms, on tiny budgets. Two clients step concurrently, so the
learner answers them in batches; a few episodes end on a time limit; evaluation episodes run greedy.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch as th

from shepherd.agents import ALGORITHMS, ParameterError
from shepherd.graph import AgentSpec, GraphManager, PresetError, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app
from shepherd.wire.spaces import parse_space

ACTIONS = {"Discrete": 3, "Box": [[2], [-1.0, 0.0], [1.0, 10.0]], "MultiDiscrete": ["MultiDiscrete", [3, 2]],
           "MultiBinary": ["MultiBinary", 3]}
OBSERVATIONS = {"Box": [[3], "-inf", "inf"], "Dict": {"position": [[2], -1, 1], "mode": 3},
                "Image": ["Image", [36, 36, 2]]}
TINY = {
    "PPO": {"n_envs": 2, "n_steps": 16, "batch_size": 16, "n_epochs": 1},
    "A2C": {"n_envs": 2, "n_steps": 8},
    "DQN": {"batch_size": 16, "buffer_size": 1000, "train_freq": 4, "target_update_interval": 20},
    "SAC": {"batch_size": 16, "buffer_size": 1000, "train_freq": 4},
    "TD3": {"batch_size": 16, "buffer_size": 1000, "train_freq": 4, "action_noise": "normal", "policy_delay": 2},
    "DDPG": {"batch_size": 16, "buffer_size": 1000, "train_freq": 4, "action_noise": "ornstein-uhlenbeck"},
    "QRDQN": {"batch_size": 16, "buffer_size": 1000, "train_freq": 4, "target_update_interval": 20,
              "policy_kwargs": {"n_quantiles": 10}},
    "TQC": {"batch_size": 16, "buffer_size": 1000, "train_freq": 4},
    "CROSSQ": {"batch_size": 16, "buffer_size": 1000, "train_freq": 4},
    "TRPO": {"n_envs": 2, "n_steps": 16, "batch_size": 16},
    "MASKABLEPPO": {"n_envs": 2, "n_steps": 16, "batch_size": 16, "n_epochs": 1},
    "RECURRENTPPO": {"n_envs": 2, "n_steps": 16, "batch_size": 16, "n_epochs": 1,
                     "policy_kwargs": {"lstm_hidden_size": 8}},
}
HEATUP = 40
#: one algorithm per buffer kind on images (each case took 5-15 s here: a NatureCNN's updates); tests/integration's
#: test_onnx_export.py and test_behaviour_policy.py build image policies of PPO, A2C, DQN, SAC and MaskablePPO too
IMAGE_ALGORITHMS = ("PPO", "DQN", "RECURRENTPPO")


def cases() -> list:
    found = []
    for name, info in ALGORITHMS.items():
        for kind in ACTIONS:
            if any(space.__name__ == kind for space in info.action_spaces):
                found.append(pytest.param(name, "Box", kind, id=f"{name}-{kind}"))
        first = next(k for k in ACTIONS if any(s.__name__ == k for s in info.action_spaces))
        if info.dict_observations:
            found.append(pytest.param(name, "Dict", first, id=f"{name}-Dict-obs-{first}"))
        if name in IMAGE_ALGORITHMS:  # CnnPolicy's rollout, replay buffer and CnnLstmPolicy, saved and reloaded
            found.append(pytest.param(name, "Image", first, id=f"{name}-Image-obs-{first}"))
    return found


def graph_manager(algorithm: str, observations: str, actions: str) -> GraphManager:
    params = {**TINY[algorithm], "seed": 0,
              "policy_kwargs": {"net_arch": [16], **TINY[algorithm].get("policy_kwargs", {})}}
    heatup = 0 if ALGORITHMS[algorithm].on_policy else HEATUP
    return GraphManager(
        owner="tests", agents=[AgentSpec("agent", algorithm, OBSERVATIONS[observations], ACTIONS[actions], params)],
        schedule=Schedule(heatup_steps=heatup, steps_between_evaluation_periods=120, evaluation_episodes=1,
                          checkpoint_every_steps=10**6, checkpoint_every_seconds=3600))


def random_obs(spec, rng: np.random.Generator):
    if isinstance(spec, dict):
        return {key: random_obs(sub, rng) for key, sub in spec.items()}
    if isinstance(spec, int):
        return int(rng.integers(spec))
    if spec[0] == "Image":
        return rng.integers(0, 256, size=spec[1]).tolist()
    return rng.uniform(-1, 1, size=spec[0]).tolist()


def check_action(space, action) -> None:
    value = np.asarray(action)
    if space.__class__.__name__ == "Box":  # the client gets actions unscaled into [low, high]
        assert value.shape == space.shape and np.all(value >= space.low) and np.all(value <= space.high), action
    else:
        assert space.contains(value.astype(space.dtype) if value.ndim else int(value)), action


async def drive(client, key: str, spec, actions_spec, steps: int, seed: int) -> None:
    """``steps`` transitions from one session: episodes of 7 steps, every other one cut by a time limit; then
    the session logs out (its part of a rollout is handed over at once, not after the learner's wait for a
    stalled session, while the other session may wait for that rollout's update)."""
    rng = np.random.default_rng(seed)
    space = parse_space(actions_spec)
    begin = True
    for step in range(steps + 1):
        ends = not begin and step % 7 == 0
        body = {"session_key": key, "obs": random_obs(spec, rng), "reward": float(rng.normal()), "done": ends,
                "info": {}, "truncated": ends and step % 14 == 0}
        response = await client.post("/shepherd/env/", json=body)
        assert response.status == 200, await response.text()
        action = (await response.json())["action"]
        if ends:
            assert action is None
        else:
            check_action(space, action)
        begin = ends
    await client.post("/shepherd/logout/", json={"session_key": key})


async def run_clients(client, algorithm_spec, steps: int, seed: int) -> None:
    keys = []
    for _ in range(2):
        response = await client.post("/shepherd/login_user/", json={"apikey": client.apikey})
        keys.append((await response.json())["session_key"])
    observations, actions = algorithm_spec
    await asyncio.gather(*(drive(client, key, OBSERVATIONS[observations], ACTIONS[actions], steps, seed + i)
                           for i, key in enumerate(keys)))


@pytest.mark.parametrize("algorithm, observations, actions", cases())
async def test_learns_saves_reloads_and_continues_over_http(aiohttp_client, tmp_path, algorithm, observations,
                                                            actions):
    data = tmp_path / "data"
    app = create_app(ServerConfig(graph_manager(algorithm, observations, actions), data))
    client = await aiohttp_client(app)
    client.apikey = app[CREATED_KEYS]["agent"]
    await run_clients(client, (observations, actions), steps=150, seed=0)
    runtime = app[GRAPH].runtime()
    learner = runtime.learner
    steps, updates = runtime.tracker.steps, learner.model._n_updates
    assert steps >= 200 and learner.failure is None  # 300 sent; greedy evaluation steps are not counted
    assert updates > 0 and learner.steps > 200
    assert runtime.evaluations, "an evaluation period ran"
    await client.close()  # the server stops: every agent is checkpointed
    saved = {k: v.clone() for k, v in learner.model.policy.state_dict().items()}

    again = create_app(ServerConfig(graph_manager(algorithm, observations, actions), data))
    client = await aiohttp_client(again)
    client.apikey = app[CREATED_KEYS]["agent"]
    resumed = again[GRAPH].runtime()
    assert resumed.tracker.steps == steps and resumed.learner.steps == learner.steps
    assert resumed.learner.model._n_updates == updates
    for name, tensor in resumed.learner.model.policy.state_dict().items():
        assert th.equal(tensor, saved[name]), name
    await run_clients(client, (observations, actions), steps=40, seed=10)
    assert resumed.tracker.steps > steps and resumed.learner.failure is None
    assert resumed.learner.model._n_updates > updates
    await client.close()


@pytest.mark.parametrize("algorithm, actions, able", [
    ("DQN", [[2], -1, 1], "PPO, A2C, SAC, TD3, DDPG, TQC, CrossQ, TRPO, RecurrentPPO"),
    ("SAC", 3, "PPO, A2C, DQN, QRDQN, TRPO, MaskablePPO, RecurrentPPO"),
    ("TD3", ["MultiDiscrete", [2, 2]], "PPO, A2C, TRPO, MaskablePPO, RecurrentPPO"),
    ("DDPG", ["MultiBinary", 2], "PPO, A2C, TRPO, MaskablePPO"),
])
def test_an_agent_whose_algorithm_cannot_act_in_its_space_is_refused(algorithm, actions, able):
    graph = GraphManager([AgentSpec("agent", algorithm, [[3], -1, 1], actions)])
    with pytest.raises(PresetError, match=f"cannot handle .* actions; algorithms that can: {able}"):
        graph.check()


def test_bad_parameters_are_refused_when_the_agent_is_built():
    from shepherd.agents import build_learner

    with pytest.raises(ParameterError, match="SAC rejected its parameters"):
        build_learner("SAC", "x", parse_space([[3], -1, 1]), parse_space([[1], -1, 1]), {"ent_coef": "often"},
                      None)


def test_parameters_sb3_refuses_stop_the_preset_with_a_clear_error(tmp_path):
    from shepherd.storage import Store

    graph = GraphManager([AgentSpec("agent", "SAC", [[3], -1, 1], [[1], -1, 1], {"ent_coef": "often"})])
    graph.check()  # a string is a valid type for ent_coef; SB3 checks the words
    store = Store(tmp_path / "data")
    try:
        with pytest.raises(PresetError, match="agent 'agent': SAC rejected its parameters"):
            graph.create_graph(store)
    finally:
        store.close()


def test_start_up_writes_the_registry_and_stores_values_typed(tmp_path):
    from shepherd.storage import Store

    graph = GraphManager([AgentSpec("agent", "A2C", [[3], -1, 1], ["MultiBinary", 2],
                                    {"normalize_advantage": "False", "n_steps": "8", "gamma": "0.9",
                                     "learning_rate": "lin_0.001", "policy_kwargs": '{"net_arch": [8]}'})])
    store = Store(tmp_path / "data")
    try:
        graph.create_graph(store)
        algorithms = {a["name"]: a for a in store.algorithms()}
        assert list(algorithms) == [a.name for a in ALGORITHMS.values()]
        assert algorithms["DQN"]["continuous"] is False and algorithms["SAC"]["continuous"] is True
        sac = {p["name"]: p for p in store.parameters("SAC")}
        assert sac["gamma"]["type"] == 2 and sac["buffer_size"]["type"] == 1 and sac["action_noise"]["type"] == 4
        record = store.agents()[0]
        assert record.parameters == {"normalize_advantage": False, "n_steps": 8, "gamma": 0.9,
                                     "learning_rate": "lin_0.001", "policy_kwargs": {"net_arch": [8]}}
        model = graph.runtime().learner.model
        assert model.normalize_advantage is False and model.n_steps == 8 and model.gamma == 0.9
        assert model.lr_schedule(0.5) == pytest.approx(0.0005)
    finally:
        graph.close()
        store.close()
