"""RecurrentPPO's per-session LSTM state over HTTP: it ends with its episode and with its session, and a
step after the session expired is refused (401) with nothing recorded."""

import asyncio
import time

from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, STORE, ServerConfig, create_app

OBS2 = [0.01, -0.02]


def graph_manager():
    return GraphManager(
        owner="tests",
        agents=[AgentSpec("memory", "RecurrentPPO", [[2], "-inf", "inf"], 2,
                          {"n_envs": 2, "n_steps": 8, "batch_size": 16, "n_epochs": 1, "seed": 0,
                           "policy_kwargs": {"net_arch": [8], "lstm_hidden_size": 8}})],
        schedule=Schedule(steps_between_evaluation_periods=None, evaluation_episodes=0))


async def login(client):
    response = await client.post("/shepherd/login_user/", json={"apikey": client.apikey})
    assert response.status == 200, await response.text()
    return (await response.json())["session_key"]


async def step(client, key, done=False):
    return await client.post("/shepherd/env/", json={"session_key": key, "obs": OBS2, "reward": 1.0, "done": done,
                                                     "info": {}})


async def until(condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_a_state_ends_with_its_episode_and_an_expired_session_is_refused_recording_nothing(
        aiohttp_client, tmp_path):
    app = create_app(ServerConfig(graph_manager(), tmp_path / "data", session_idle_seconds=1.0, sweep_seconds=0.1))
    client = await aiohttp_client(app)
    client.apikey = app[CREATED_KEYS]["memory"]
    graph = app[GRAPH]
    runtime = graph.runtime()
    adapter = runtime.learner.algorithm

    ending, expiring = await login(client), await login(client)
    for key in (ending, expiring):
        for _ in range(3):
            assert (await step(client, key)).status == 200
    assert adapter.actor_states == 2  # one state per session
    assert await (await step(client, ending, done=True)).json() == {"action": None}
    await until(lambda: adapter.actor_states == 1)  # the ended episode's state is gone; its session lives
    assert (await step(client, ending)).status == 200  # a new episode, from a fresh state
    assert adapter.actor_states == 2

    async def keep_alive():  # the first session stays active; the second says nothing more
        while graph.sessions and len(graph.sessions) > 1:
            await step(client, ending)
            await asyncio.sleep(0.1)

    alive = asyncio.create_task(keep_alive())
    await until(lambda: len(graph.sessions) == 1)  # the idle session expired ...
    await alive
    await until(lambda: adapter.actor_states == 1)  # ... and the learner dropped its state
    steps, learned = runtime.tracker.steps, runtime.learner.steps
    returns = len(app[STORE].returns(runtime.record.id))

    response = await step(client, expiring)
    assert response.status == 401 and "unknown or expired session" in (await response.json())["error"]
    assert await (await step(client, expiring, done=True)).json() == {
        "error": "unknown or expired session_key; log in again"}
    await asyncio.sleep(0.2)
    assert runtime.tracker.steps == steps and runtime.learner.steps == learned
    assert len(app[STORE].returns(runtime.record.id)) == returns
    assert adapter.actor_states == 1 and len(graph.sessions) == 1
    await client.close()
