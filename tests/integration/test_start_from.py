"""``run.py -crd DIR`` / ``-crf FILE``: a preset's agents start from another data folder's checkpoints, or from one
model zip (`shepherd.graph.start_from`), checked first and refused in one line when they do not fit; an agent
with a model of its own resumes it."""

from __future__ import annotations

import asyncio
import zipfile
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3 import PPO
from stable_baselines3.common.save_util import load_from_zip_file

from shepherd.cli.main import main
from shepherd.graph import AgentSpec, GraphManager, PresetError, Schedule
from shepherd.graph.local import serving_here
from shepherd.graph.start_from import StartingCheckpoints
from shepherd.http import GRAPH, ServerConfig, create_app
from shepherd.storage import DataFolderLock, Store
from shepherd.storage.peek import read_agents

OBS = [[4], "-inf", "inf"]


def graph(seed: int = 0, net: int = 16, obs=OBS, name: str = "pole", agents: int = 1) -> GraphManager:
    values = {"n_envs": 2, "n_steps": 8, "batch_size": 16, "n_epochs": 1, "seed": seed,
              "policy_kwargs": {"net_arch": [net]}}
    specs = [AgentSpec(name if index == 0 else f"{name}{index}", "PPO", obs, 2, dict(values)) for index in range(agents)]
    return GraphManager(owner="tests", agents=specs, schedule=Schedule(checkpoint_every_seconds=3600.0))


async def saved(data: Path, manager: GraphManager) -> None:
    """Serve ``manager`` on ``data`` for a moment: its agents are created, and checkpointed at the close."""
    store = Store(data)
    manager.create_graph(store, serving_here())
    manager.end_sessions()
    await asyncio.to_thread(manager.close)
    store.close()


def policy(path: Path) -> dict[str, np.ndarray]:
    _, params, _ = load_from_zip_file(path, device="cpu")
    return {name: tensor.numpy() for name, tensor in params["policy"].items()}


def served_policy(app) -> dict[str, np.ndarray]:
    model = app[GRAPH].runtime().learner.algorithm.model
    return {name: tensor.detach().numpy() for name, tensor in model.policy.state_dict().items()}


def same(first: dict, second: dict) -> bool:
    return first.keys() == second.keys() and all(np.array_equal(first[name], second[name]) for name in first)


class Unbounded(gym.Env):
    """The preset's spaces (CartPole's own observation space has bounds, so its models are refused)."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return np.zeros(4, np.float32), {}

    def step(self, action):
        return np.zeros(4, np.float32), 0.0, True, False, {}


@pytest.fixture
async def source(tmp_path) -> Path:
    folder = tmp_path / "trained"
    await saved(folder, graph(seed=1))  # other initial weights than the seed-0 agents below
    return folder


async def test_the_agents_start_from_the_other_folder_s_checkpoints(aiohttp_client, tmp_path, source):
    manager = graph()
    start_from = StartingCheckpoints.of_folder(source, manager.preset)
    client = await aiohttp_client(create_app(ServerConfig(manager, tmp_path / "data", start_from=start_from)))
    trained = policy(source / "agents" / "1" / "model.zip")
    assert same(served_policy(client.server.app), trained)
    assert (tmp_path / "data" / "agents" / "1" / "model.zip").exists()  # copied into the served data folder
    assert start_from.laid == ["pole"]


async def test_an_agent_with_a_model_of_its_own_resumes_it(aiohttp_client, tmp_path, source):
    data = tmp_path / "data"
    await saved(data, graph())
    own = policy(data / "agents" / "1" / "model.zip")
    manager = graph()
    start_from = StartingCheckpoints.of_folder(source, manager.preset)
    client = await aiohttp_client(create_app(ServerConfig(manager, data, start_from=start_from)))
    assert same(served_policy(client.server.app), own) and start_from.laid == []
    assert not same(own, policy(source / "agents" / "1" / "model.zip"))


async def test_one_sb3_zip_starts_a_one_agent_preset(aiohttp_client, tmp_path):
    model = PPO("MlpPolicy", Unbounded(), n_steps=16, batch_size=16, seed=3, policy_kwargs={"net_arch": [16]})
    model.save(tmp_path / "sb3.zip")  # SB3's own zip, no shepherd.json
    manager = graph()
    start_from = StartingCheckpoints.of_file(tmp_path / "sb3.zip", manager.preset)
    client = await aiohttp_client(create_app(ServerConfig(manager, tmp_path / "data", start_from=start_from)))
    assert same(served_policy(client.server.app), policy(tmp_path / "sb3.zip"))
    with zipfile.ZipFile(tmp_path / "data" / "agents" / "1" / "model.zip") as archive:
        assert "shepherd.json" in archive.namelist()  # a checkpoint now, with counters from zero


@pytest.mark.parametrize("preset, words", [
    (graph(obs=[[3], "-inf", "inf"]), "agent pole is PPO with observations [[4], '-inf', 'inf']"),
    (graph(net=32), "the model"),
    (graph(name="cart"), "the data folder holds no agent named cart"),
])
def test_a_folder_that_does_not_fit_is_refused_in_one_line(source, preset, words):
    with pytest.raises(PresetError) as raised:
        StartingCheckpoints.of_folder(source, preset.preset)
    message = str(raised.value)
    assert message.startswith(f"-crd {source}: ") and words in message and "\n" not in message, message
    if words == "the model":
        assert "does not fit agent pole's network and spaces (mlp_extractor.policy_net.0.weight: saved [16, 4], " \
               "now [32, 4]" in message


def test_a_file_that_does_not_fit_is_refused_in_one_line(tmp_path, source):
    model = source / "agents" / "1" / "model.zip"
    cases = [(graph(agents=2), model, "one model zip starts a preset of one agent, and this one has 2"),
             (graph(obs=[[3], "-inf", "inf"]), model, "observation_space: saved Box"),
             (graph(), tmp_path / "missing.zip", "no such file")]
    (tmp_path / "text.zip").write_text("not a zip")
    cases.append((graph(), tmp_path / "text.zip", "text.zip is not a model zip (ValueError"))
    for manager, path, words in cases:
        with pytest.raises(PresetError) as raised:
            StartingCheckpoints.of_file(path, manager.preset)
        message = str(raised.value)
        assert message.startswith(f"-crf {path}: ") and words in message and "\n" not in message, message


def test_another_folder_is_read_without_a_write_while_a_server_holds_it(source):
    store_file = source / "store.json"
    before = (store_file.read_bytes(), store_file.stat().st_mtime_ns)
    lock = DataFolderLock(source)
    lock.acquire()  # as a server serving it does
    try:
        (agent,) = read_agents(source)
    finally:
        lock.release()
    assert (agent.owner, agent.record.name, agent.folder) == ("tests", "pole", source / "agents" / "1")
    assert (store_file.read_bytes(), store_file.stat().st_mtime_ns) == before


def test_run_py_refuses_a_misfit_in_one_line_before_serving(tmp_path, source, capsys):
    preset = tmp_path / "wide.yaml"
    preset.write_text("owner: tests\nagents:\n  - name: pole\n    algorithm: PPO\n    observation_space: [[4], -inf, inf]\n"
                      "    action_space: 2\n    parameters: {n_steps: 16, batch_size: 16, policy_kwargs: {net_arch: [64]}}\n")
    code = main(["-p", str(preset), "-crd", str(source), "--data", str(tmp_path / "data"), "--port", "0"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: -crd {source}: the model"), err
    assert "Traceback" not in err and not (tmp_path / "data").exists()  # nothing was created


async def test_an_advised_agent_starts_with_every_client_of_the_other_folder(tmp_path):
    def advised(seed: int) -> GraphManager:
        values = {"n_envs": 1, "n_steps": 16, "batch_size": 16, "n_epochs": 1, "seed": seed,
                  "policy_kwargs": {"net_arch": [8]}}
        return GraphManager(owner="tests", agents=[AgentSpec("arms", "PPO", OBS, 2, values, sharing="advised")],
                            schedule=Schedule(checkpoint_every_seconds=3600.0))

    source = tmp_path / "trained"
    manager, store = advised(1), Store(source)
    key = manager.create_graph(store, serving_here())["arms"]
    for name in ("left", "right"):
        manager.logout(manager.login(key, client=name).key)  # each name builds its client's learner
    manager.end_sessions()
    await asyncio.to_thread(manager.close)
    store.close()
    clients = source / "agents" / "1" / "clients"
    assert sorted(path.name for path in clients.iterdir()) == ["left", "right"]

    manager = advised(0)  # other weights than the source's at seed 1
    start_from = StartingCheckpoints.of_folder(source, manager.preset)
    store = Store(tmp_path / "served")
    manager.create_graph(store, replace(serving_here(), start_from=start_from))
    try:
        served = manager.served.agents[1].clients
        assert sorted(served) == ["left", "right"] and start_from.laid == ["arms"]
        for name in ("left", "right"):
            model = served[name].learner.algorithm.model
            now = {k: v.detach().numpy() for k, v in model.policy.state_dict().items()}
            assert same(now, policy(clients / name / "model.zip"))
    finally:
        manager.end_sessions()
        await asyncio.to_thread(manager.close)
        store.close()
