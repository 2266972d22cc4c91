"""``run.py -s SECONDS`` through the real app: the preset's checkpoint period, which the runtime's periodic
checkpoint follows (a checkpoint at the first learned step once the period has passed)."""

import asyncio

import pytest

from shepherd.cli import coach
from shepherd.cli.main import build_parser
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app


def graph_manager():
    return GraphManager(owner="tests", agents=[AgentSpec("pole", "PPO", [[4], "-inf", "inf"], 2,
                                                         {"n_envs": 2, "n_steps": 8, "batch_size": 16, "seed": 0})],
                        schedule=Schedule(checkpoint_every_steps=10_000, checkpoint_every_seconds=3600.0))


async def step(client, key, t):
    response = await client.post("/shepherd/env/", json={"session_key": key, "obs": [0.01 * t, 0.0, 0.0, 0.0],
                                                          "reward": 1.0, "done": False, "info": {}})
    assert response.status == 200


@pytest.mark.parametrize("option", [[], ["-s", "0.05"]])
async def test_s_sets_the_period_of_the_periodic_checkpoint(aiohttp_client, tmp_path, option):
    manager = graph_manager()
    coach.apply_to_graph(manager, build_parser().parse_args(["-p", "x", *option]))
    app = create_app(ServerConfig(manager, tmp_path / "data"))
    client = await aiohttp_client(app)
    response = await client.post("/shepherd/login_user/", json={"apikey": app[CREATED_KEYS]["pole"]})
    key = (await response.json())["session_key"]
    for t in range(3):
        await step(client, key, t)
    await asyncio.sleep(0.2)  # longer than -s 0.05, far shorter than the preset's hour
    await step(client, key, 3)
    runtime = app[GRAPH].runtime()
    if option:
        runtime.checkpoints.pending.result(30)
        assert runtime.model_path.exists()
    else:
        assert runtime.checkpoints.pending is None and not runtime.model_path.exists()
