"""A restart is invisible to learning (issue 48, "Exact resume"): a seeded agent fed by one deterministic client
in two halves ends with the same weights whether or not its server was stopped (the graph closed with its final
checkpoint) and started again (a new graph on the same data folder) between the halves. Driven in-process
(shepherd.graph.local), as the server drives it; DQN, PPO, SAC and RecurrentPPO. And what one client's timing
may change (an episode's end batched with the next start, or alone) changes nothing that is learned."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.save_util import load_from_zip_file

from shepherd.agents import ActMode, Kind, Request, build_learner, checkpoint
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.graph.local import drive, serving_here
from shepherd.storage import Store
from shepherd.wire.spaces import parse_space

NET = {"net_arch": [16]}
#: (algorithm, env, observation space, action space, parameters): small budgets, every partial state reached
#: at the halfway point (a replay buffer and a train_freq count under way, a rollout filled in part)
AGENTS = {
    "DQN": ("CartPole-v1", [[4], "-inf", "inf"], 2, {
        "buffer_size": 1000, "batch_size": 16, "train_freq": 4, "target_update_interval": 40,
        "exploration_fraction": 0.5, "policy_kwargs": NET}),
    "PPO": ("CartPole-v1", [[4], "-inf", "inf"], 2, {
        "n_steps": 48, "batch_size": 16, "n_epochs": 2, "policy_kwargs": NET}),
    "RecurrentPPO": ("CartPole-v1", [[4], "-inf", "inf"], 2, {  # its rollout rows hold LSTM states too
        "n_steps": 48, "batch_size": 16, "n_epochs": 2, "policy_kwargs": {"net_arch": [16], "lstm_hidden_size": 8}}),
    "SAC": ("Pendulum-v1", [[3], "-inf", "inf"], [[1], -2, 2], {
        "buffer_size": 1000, "batch_size": 16, "train_freq": 3, "gradient_steps": 2, "policy_kwargs": NET,
        "action_noise": "ornstein-uhlenbeck"}),
}
FIRST, SECOND = 130, 110  # each half's env steps: neither a multiple of train_freq nor of n_steps


def graph_of(algorithm: str, remote: Any = None) -> GraphManager:
    _, observations, actions, parameters = AGENTS[algorithm]
    heatup = 0 if algorithm.endswith("PPO") else 40  # on-policy agents have no heatup
    graph = GraphManager(owner="tests", agents=[AgentSpec("agent", algorithm, observations, actions,
                                                          {**parameters, "seed": 3})],
                         schedule=Schedule(heatup_steps=heatup, steps_between_evaluation_periods=None,
                                           checkpoint_every_steps=50, checkpoint_every_seconds=3600.0))
    graph.remote_learners = remote  # None: in this process; RayLearners: each learner in a Ray actor
    return graph


async def half(data: Path, algorithm: str, steps: int, seed: int, graph: GraphManager | None = None,
               key: str | None = None, remote: Any = None) -> tuple[GraphManager, Store, str, list[float]]:
    """One half: ``steps`` env steps of one client (its env's first reset seeded ``seed``), on ``graph`` or on
    a new graph built on ``data``; then the client logs out (the episode under way is abandoned)."""
    store: Store | None = None
    if graph is None:
        graph, store = graph_of(algorithm, remote), Store(data)
        keys = graph.create_graph(store, serving_here())
        key = keys["agent"] if keys else store.add_api_key(store.agents()[0].id, "tests")[0]
    assert key is not None
    returns = await drive(graph, key, gym.make(AGENTS[algorithm][0]), steps=steps, seed=seed)
    graph.runtime().checkpoint().result(30)  # queued behind every step: the learner has handled them all
    return graph, store or graph.store, key, returns  # type: ignore[return-value]


async def stop(graph: GraphManager, store: Store) -> None:
    graph.end_sessions()
    await asyncio.to_thread(graph.close)
    store.close()


def learned(data: Path) -> dict[str, Any]:
    """The weights and counters of the final checkpoint in ``data`` (the learner may be in another process)."""
    path = checkpoint.model_path(data / "agents" / "1")
    _, params, _ = load_from_zip_file(path, device="cpu")
    weights = {name: value.numpy() for name, value in (params or {})["policy"].items()}
    counters = checkpoint.read_state(path)["learner"]
    return {"weights": weights, "steps": counters["num_timesteps"], "updates": counters["n_updates"]}


async def run(data: Path, algorithm: str, restart: bool, remote: Any = None) -> tuple[dict[str, Any], list[float]]:
    """Both halves, with a stop and a start between them or not; the final checkpoint's weights and the returns."""
    graph, store, key, returns = await half(data, algorithm, FIRST, seed=0, remote=remote)
    try:
        if restart:
            await stop(graph, store)
            graph, store, key, more = await half(data, algorithm, SECOND, seed=1, remote=remote)
        else:
            graph, store, key, more = await half(data, algorithm, SECOND, seed=1, graph=graph, key=key)
    finally:
        await stop(graph, store)
    return learned(data), returns + more


def check_the_same(straight: tuple[dict[str, Any], list[float]], resumed: tuple[dict[str, Any], list[float]]) -> None:
    (first, first_returns), (again, again_returns) = straight, resumed
    assert first["updates"] > 0 and (first["steps"], first["updates"]) == (again["steps"], again["updates"])
    assert again_returns == first_returns
    weights, resumed_weights = first["weights"], again["weights"]
    assert weights.keys() == resumed_weights.keys()
    assert [name for name in weights if not np.array_equal(weights[name], resumed_weights[name])] == []


@pytest.mark.parametrize("algorithm", sorted(AGENTS))
async def test_a_restart_between_two_halves_changes_nothing_a_seeded_agent_learns(tmp_path, algorithm):
    check_the_same(await run(tmp_path / "straight", algorithm, restart=False),
                   await run(tmp_path / "resumed", algorithm, restart=True))


async def test_the_replay_buffer_is_written_beside_the_agents_checkpoint_which_names_it(tmp_path):
    graph, store, _, _ = await half(tmp_path / "data", "DQN", 60, seed=0)
    folder = store.agent_folder(store.agents()[0].id)
    await stop(graph, store)
    saved = checkpoint.read_state(checkpoint.model_path(folder))["learner"]["replay_buffer"]
    assert saved["file"] == checkpoint.REPLAY_BUFFER_FILE and saved["transitions"] == 60
    assert (folder / checkpoint.REPLAY_BUFFER_FILE).stat().st_size == saved["bytes"]


def fed_one_client(algorithm: str, together: bool,
                   limit: int | None) -> tuple[list[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """A seeded on-policy learner fed by one client for FIRST steps of CartPole (episodes cut at ``limit`` steps,
    if given: ends valued for their time-limit bootstrap): each episode's end and the next
    episode's first step reach the learner in one batch (``together``), or in two (the end alone, then the
    start), as a server's timing makes them; the rollouts each update trained on, and the weights after."""
    _, observations, actions, parameters = AGENTS[algorithm]
    built = build_learner(algorithm, "agent", parse_space(observations), parse_space(actions),
                          {**parameters, "seed": 3}, None)
    rollouts: list[dict[str, np.ndarray]] = []
    model, train = built.model, built.model.train

    def keeping() -> None:
        buffer = model.rollout_buffer
        rollouts.append({name: getattr(buffer, name).copy() for name in ("values", "log_probs", "rewards")})
        train()

    model.train = keeping
    env = gym.make("CartPole-v1", max_episode_steps=limit)
    built.start()
    try:
        obs, _ = env.reset(seed=0)
        action = built.begin_episode(1, obs, ActMode.EXPLORE).result(30)
        for _ in range(FIRST):
            obs, reward, terminated, truncated, _ = env.step(int(action))
            if not (terminated or truncated):
                action = built.step(1, float(reward), obs, ActMode.EXPLORE).result(30)
                continue
            end = Request(Kind.END, 1, obs, float(reward), bool(truncated), ActMode.EXPLORE)
            obs, _ = env.reset()
            begin = Request(Kind.BEGIN, 1, obs, 0.0, False, ActMode.EXPLORE)
            if together:
                action = built.submit([end, begin]).result(30)[0]
            else:
                built.submit([end]).result(30)
                built.mark().result(30)  # the end is handled before the start is queued
                action = built.submit([begin]).result(30)[0]
        built.mark().result(30)
        weights = {name: value.clone().numpy() for name, value in model.policy.state_dict().items()}
    finally:
        built.close()
    return rollouts, weights


@pytest.mark.parametrize("limit", [None, 9])
@pytest.mark.parametrize("algorithm", ["PPO", "RecurrentPPO"])
def test_an_episode_end_batched_with_the_next_start_or_alone_learns_the_same(algorithm, limit):
    """One client's episode end (sent without waiting for an answer) and its next episode's start share a batch
    or not as the server's threads happen to run: what is learned must not depend on it. A forward pass of
    one row rounds apart from the same row in a batch of two, so the start's value must never be computed
    beside the end's (and an end is valued only when its value is used: at a time limit)."""
    together, apart = fed_one_client(algorithm, True, limit), fed_one_client(algorithm, False, limit)
    assert len(together[0]) == len(apart[0]) == 2
    for first, second in zip(together[0], apart[0]):
        assert [name for name in first if not np.array_equal(first[name], second[name])] == []
    assert [name for name in together[1] if not np.array_equal(together[1][name], apart[1][name])] == []
