"""``--seed N`` (load_preset's ``seed``) makes one agent fed by one client learn the same from run to run: the
same initial weights, actions and updates. Driven in-process (shepherd.graph.local), as the server drives it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import gymnasium as gym
import numpy as np

from shepherd.graph import GraphManager
from shepherd.loading import load_preset
from shepherd.graph.local import drive, serving_here
from shepherd.storage import Store
from tests.conftest import TEST_PRESETS

PRESET = str(TEST_PRESETS / "tiny_ppo_yaml.yaml")


async def learn(data: Path, seed: int | None) -> tuple[list[float], dict[str, np.ndarray]]:
    """The returns of one client's 300 steps (env seeded 0) and the agent's weights after them."""
    one_segment = ["agents.tiny.parameters.n_envs=1", "agents.tiny.parameters.batch_size=32",
                   "schedule.steps_between_evaluation_periods=null"]
    graph = GraphManager.of(load_preset(PRESET, overrides=one_segment, seed=seed))
    store = Store(data)
    try:
        key = graph.create_graph(store, serving_here())["tiny"]
        returns = await drive(graph, key, gym.make("CartPole-v1"), steps=300, seed=0)
        runtime = graph.runtime()
        runtime.checkpoint().result(30)  # queued behind every step: the learner has handled them all
        assert runtime.learner.model._n_updates > 0
        weights = {name: value.detach().numpy().copy()
                   for name, value in runtime.learner.model.policy.state_dict().items()}
        return returns, weights
    finally:
        graph.end_sessions()
        await asyncio.to_thread(graph.close)
        store.close()


async def test_a_seeded_agent_fed_by_one_client_learns_the_same_twice(tmp_path):
    first_returns, first = await learn(tmp_path / "one", seed=5)
    again_returns, again = await learn(tmp_path / "two", seed=5)
    assert first_returns == again_returns
    assert first.keys() == again.keys() and all(np.array_equal(first[name], again[name]) for name in first)
    _, other = await learn(tmp_path / "three", seed=6)
    assert not all(np.array_equal(first[name], other[name]) for name in first)
