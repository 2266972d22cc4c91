"""``run.py agents lesson AGENT NAME`` with no server running (docs/lessons.md): the lesson is written into the
agent's checkpoint, and the next serve starts there; an agent without a checkpoint is refused in one line. The
commands run in a thread: each runs its own event loop."""

from __future__ import annotations

import asyncio

import gymnasium as gym

from shepherd.agents import checkpoint
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.graph.local import drive
from tests.integration.test_admin_cli import fails, ok
from tests.integration.test_graph_local import barrier, start, stop

PPO = {"n_envs": 1, "n_steps": 16, "batch_size": 16, "n_epochs": 1, "seed": 0, "policy_kwargs": {"net_arch": [8]}}
LESSONS = [{"name": "short", "config": {"length": 0.3}, "until": {"evaluation_return": 10 ** 6}},
           {"name": "long", "config": {"length": {"uniform": [0.8, 1.0]}}}]


def taught() -> GraphManager:
    return GraphManager(owner="tests", agents=[AgentSpec("pole", "PPO", [[4], "-inf", "inf"], 2, dict(PPO),
                                                         lessons=LESSONS)],
                        schedule=Schedule(checkpoint_every_seconds=3600.0))


async def test_a_lesson_moved_with_no_server_running_is_where_the_next_serve_starts(tmp_path, capsys):
    data = tmp_path / "data"
    graph, store, key = await start(data, taught())
    try:
        await drive(graph, key, gym.make("CartPole-v1"), episodes=2, seed=0)
        steps = graph.runtime().tracker.steps
        barrier(graph)  # the checkpoint is written
    finally:
        await stop(graph, store)
    model = checkpoint.model_path(data / "agents" / "1")
    saved = checkpoint.read_state(model)["lessons"]
    assert saved["lesson"] == "short" and saved["streak"] == 0 and "generator" in saved  # the configs' generator too

    assert "has no lesson 'middle'; its lessons: short, long" in await asyncio.to_thread(
        fails, capsys, "agents", "lesson", "tests/pole", "middle", "--data", str(data))
    out = await asyncio.to_thread(ok, capsys, "agents", "lesson", "tests/pole", "long", "--data", str(data))
    assert "agent tests/pole is not served: moved to lesson 'long' in its checkpoint" in out
    state = checkpoint.read_state(model)
    assert state["lessons"] == {"lesson": "long", "streak": 0} and state["schedule"]["steps"] == steps

    graph, store, key = await start(data, taught())  # served again: resumed in the lesson, model and counters kept
    try:
        runtime = graph.runtime()
        assert runtime.lessons.name == "long" and runtime.tracker.steps == steps
        await drive(graph, key, gym.make("CartPole-v1"), episodes=1, seed=1)
        barrier(graph)
        last = store.returns(runtime.record.id)[-1]
        assert last.lesson == "long" and 0.8 <= last.config["length"] <= 1.0
    finally:
        await stop(graph, store)


async def test_an_agent_with_no_checkpoint_is_refused_saying_it_starts_in_its_first_lesson(tmp_path, capsys):
    data = tmp_path / "data"
    graph, store, _ = await start(data, taught())
    await stop(graph, store)
    await asyncio.to_thread(ok, capsys, "agents", "delete-model", "tests/pole", "--data", str(data))
    assert not checkpoint.model_path(data / "agents" / "1").exists()
    error = await asyncio.to_thread(fails, capsys, "agents", "lesson", "tests/pole", "long", "--data", str(data))
    assert "agent tests/pole is not served and has no checkpoint yet" in error
    assert "it starts in its first lesson ('short') when served; serve it, then move it" in error


async def test_an_advised_agents_clients_are_all_moved_in_their_checkpoints(tmp_path, capsys):
    data = tmp_path / "data"
    spec = AgentSpec("pole", "PPO", [[4], "-inf", "inf"], 2, dict(PPO), sharing="advised", lessons=LESSONS)
    graph, store, key = await start(data, GraphManager(owner="tests", agents=[spec],
                                                       schedule=Schedule(checkpoint_every_seconds=3600.0)))
    try:
        for name in ("arm-1", "arm-2"):
            await drive(graph, key, gym.make("CartPole-v1"), episodes=1, seed=0, client_name=name)
    finally:
        await stop(graph, store)  # each client's learner checkpoints as it stops
    out = await asyncio.to_thread(ok, capsys, "agents", "lesson", "tests/pole", "long", "--data", str(data))
    assert "moved to lesson 'long' in its 2 clients' checkpoints" in out
    for name in ("arm-1", "arm-2"):
        model = checkpoint.model_path(data / "agents" / "1" / "clients" / name)
        assert checkpoint.read_state(model)["lessons"] == {"lesson": "long", "streak": 0}
