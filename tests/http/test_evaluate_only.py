"""``run.py --evaluate`` through the real app: every login answered in evaluate mode, no weight changed by a run of
steps, no checkpoint written at the stop, and the stop after N env steps (`shepherd.cli.coach.stop_after`)."""

import asyncio

import numpy as np
import pytest

from shepherd.cli import coach
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.graph.validation import Outcome
from shepherd.http import CREATED_KEYS, GRAPH, STORE, ServerConfig, create_app

OBS4 = [0.01, -0.02, 0.03, 0.04]


def graph_manager():
    # a rollout of 2 x 8 steps: 40 training steps would update the weights twice
    return GraphManager(owner="tests", agents=[AgentSpec("pole", "PPO", [[4], "-inf", "inf"], 2,
                                                         {"n_envs": 2, "n_steps": 8, "batch_size": 16, "n_epochs": 1,
                                                          "seed": 0})],
                        schedule=Schedule(checkpoint_every_steps=10_000, checkpoint_every_seconds=3600.0))


async def client_of(aiohttp_client, data, evaluate_only):
    app = create_app(ServerConfig(graph_manager(), data, evaluate_only=evaluate_only))
    client = await aiohttp_client(app)
    client.apikey = app[CREATED_KEYS]["pole"]
    return client


def weights(app):
    model = app[GRAPH].runtime().learner.algorithm.model
    return {name: tensor.detach().numpy().copy() for name, tensor in model.policy.state_dict().items()}


async def login(client, **login):
    response = await client.post("/shepherd/login_user/", json={"apikey": client.apikey, **login})
    assert response.status == 200
    return await response.json()


async def send(client, key, requests, episode=10):
    """``requests`` steps; an episode of ``episode`` requests is ``episode - 1`` env steps (its first carries
    the reset observation)."""
    for t in range(requests):
        obs = [0.01 * (t % 7), -0.02, 0.03, 0.04]
        response = await client.post("/shepherd/env/", json={"session_key": key, "obs": obs, "reward": 1.0,
                                                              "done": t % episode == episode - 1, "info": {}})
        assert response.status == 200


async def play(client, requests, **fields):
    reply = await login(client, **fields)
    await send(client, reply["session_key"], requests)
    return reply


@pytest.mark.parametrize("evaluate_only", [True, False])
async def test_a_run_of_training_logins_changes_the_weights_only_when_not_evaluate_only(aiohttp_client, tmp_path,
                                                                                         evaluate_only):
    client = await client_of(aiohttp_client, tmp_path / "data", evaluate_only)
    app = client.server.app
    before = weights(app)
    reply = await play(client, 40)  # a training login ({"apikey"} alone)
    app[GRAPH].runtime().checkpoint().result(30)  # the learner handled every step
    after = weights(app)
    same = all(np.array_equal(before[name], after[name]) for name in before)
    runtime = app[GRAPH].runtime()
    if evaluate_only:
        assert reply["mode"] == "evaluate"
        assert same and runtime.tracker.steps == 0 and runtime.learner.steps == 0
        assert {record.phase for record in app[STORE].returns(runtime.record.id)} == {"deploy"}
    else:
        assert "mode" not in reply  # the learning server's reply has no mode (docs/protocol.md)
        assert not same and runtime.tracker.steps == 36  # the step that ends an episode acts no more


async def test_an_evaluation_login_says_its_mode_too_and_the_stop_writes_no_checkpoint(aiohttp_client, tmp_path):
    client = await client_of(aiohttp_client, tmp_path / "data", True)
    app = client.server.app
    model = app[GRAPH].runtime().model_path
    reply = await play(client, 15, mode="evaluate")
    assert reply["mode"] == "evaluate"
    await client.close()  # the app's cleanup: sessions end, the graph closes
    assert not model.exists()  # a server that learns checkpoints at its stop; this one wrote nothing


async def test_stop_after_n_env_steps(aiohttp_client, tmp_path):
    client = await client_of(aiohttp_client, tmp_path / "data", True)
    graph = client.server.app[GRAPH]
    outcome, stop = Outcome(), asyncio.Event()
    watcher = asyncio.create_task(coach.stop_after(graph, 25, outcome, stop))
    key = (await login(client))["session_key"]
    await send(client, key, 25, episode=1000)  # the first observation, then 24 env steps
    await asyncio.sleep(3 * coach.EVALUATE_POLL_SECONDS)
    assert not stop.is_set() and coach.evaluated_steps(graph) == 24
    await send(client, key, 1, episode=1000)
    await asyncio.wait_for(stop.wait(), 5)
    await watcher
    assert outcome.code == 0 and outcome.reason == "--evaluate 25: stopped at 25 env steps"
    assert coach.evaluation_lines(graph) == ["agent pole: 25 env steps, 0 episodes completed in evaluate mode "
                                             "(their returns are on its curve, phase deploy)"]


async def test_without_n_it_serves_until_stopped(aiohttp_client, tmp_path):
    client = await client_of(aiohttp_client, tmp_path / "data", True)
    outcome, stop = Outcome(), asyncio.Event()
    watcher = asyncio.create_task(coach.stop_after(client.server.app[GRAPH], 0, outcome, stop))
    await play(client, 30)
    await asyncio.sleep(3 * coach.EVALUATE_POLL_SECONDS)
    assert not stop.is_set() and outcome.code is None
    stop.set()
    await watcher


@pytest.mark.parametrize("evaluate_only", [True, False])
async def test_an_evaluate_only_run_writes_no_training_metrics(aiohttp_client, tmp_path, monkeypatch, evaluate_only):
    """Issue 48, L12: ``--evaluate`` wrote progress.csv and a TensorBoard events file into the data folder; an
    evaluate-only run learns nothing, so it writes no training metrics (a training run of the same steps does)."""
    from shepherd.agents.metrics import MetricsWriter
    from shepherd.storage.metrics import metrics_folder
    monkeypatch.setattr(MetricsWriter, "update_seconds", 0.0)  # a row whenever one is due at all
    monkeypatch.setattr(MetricsWriter, "every_seconds", 0.0)
    client = await client_of(aiohttp_client, tmp_path / "data", evaluate_only)
    app = client.server.app
    folder = metrics_folder(app[STORE].agent_folder(app[GRAPH].runtime().record.id))
    await play(client, 40)
    app[GRAPH].runtime().checkpoint().result(30)  # the learner handled every step (and ticked its writer)
    await client.close()  # the learner stops: its last row, if any was due
    written = sorted(path.name.split(".")[0] for path in folder.glob("*")) if folder.exists() else []
    assert written == ([] if evaluate_only else ["events", "progress"])
