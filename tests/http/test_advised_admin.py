"""The admin side of an advised agent over HTTP: each client's curve (the agent's stays the union), one
client's export (SB3 zip and ONNX, its own network), unknown client names as 404s naming the known ones,
and the clients in ``/metrics`` and ``/shepherd/health``."""

import io
import json
import zipfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from stable_baselines3 import PPO

from shepherd.agents.export.export import ADVICE_LEFT_OUT, metadata
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app
from shepherd.http.state import CREATED_ADMIN_TOKEN

API = "/shepherd/admin/api"
OBS4 = [0.01, -0.02, 0.03, 0.04]
BOX4 = [[4], "-inf", "inf"]
PPO_SMALL = {"n_envs": 1, "n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0, "policy_kwargs": {"net_arch": [8]}}


@pytest.fixture
async def http(aiohttp_client, tmp_path):
    graph = GraphManager(owner="tests", schedule=Schedule(), agents=[
        AgentSpec("arms", "PPO", BOX4, 2, dict(PPO_SMALL), sharing="advised"),
        AgentSpec("pole", "PPO", BOX4, 2, dict(PPO_SMALL))])
    app = create_app(ServerConfig(graph, tmp_path / "data", metrics="open"))
    client = await aiohttp_client(app)
    client.keys = app[CREATED_KEYS]
    client.auth = {"Authorization": f"Bearer {app[CREATED_ADMIN_TOKEN]}"}
    client.graph = app[GRAPH]
    return client


async def play(http, agent, episodes, steps, client=None, reward=1.0):
    """Log in (as ``client``) and play ``episodes`` episodes of ``steps`` steps of ``reward`` each."""
    login = {"apikey": http.keys[agent], **({"client": client} if client else {})}
    response = await http.post("/shepherd/login_user/", json=login)
    assert response.status == 200, await response.text()
    key = (await response.json())["session_key"]
    for _ in range(episodes):
        for step in range(steps + 1):
            response = await http.post("/shepherd/env/", json={"session_key": key, "obs": OBS4, "reward": reward,
                                                               "done": step == steps, "info": {}})
            assert response.status == 200, await response.text()
    await http.post("/shepherd/logout/", json={"session_key": key})


async def get(http, path, status=200):
    response = await http.get(API + path, headers=http.auth)
    assert response.status == status, (path, response.status, await response.text())
    return response


async def agent_ids(http):
    agents = await (await get(http, "/agents")).json()
    return {agent["name"]: agent["id"] for agent in agents}


async def test_each_client_has_its_curve_and_the_agents_curve_is_their_union(http):
    await play(http, "arms", episodes=2, steps=3, client="arm-1", reward=1.0)
    await play(http, "arms", episodes=3, steps=2, client="arm-2", reward=2.0)
    arms = (await agent_ids(http))["arms"]
    union = await (await get(http, f"/agents/{arms}/returns")).json()
    assert union["total"] == 5
    assert sorted((r["client"], r["value"]) for r in union["returns"]) == [("arm-1", 3.0)] * 2 + [("arm-2", 4.0)] * 3
    one = await (await get(http, f"/agents/{arms}/returns?client=arm-1")).json()
    assert one["total"] == 2 and [(r["client"], r["value"], r["length"]) for r in one["returns"]] == [("arm-1", 3.0, 3)] * 2
    two = await (await get(http, f"/agents/{arms}/returns?client=arm-2&offset=2")).json()
    assert (two["total"], two["offset"], [r["value"] for r in two["returns"]]) == (3, 2, [4.0])
    csv = (await (await get(http, f"/agents/{arms}/returns.csv?client=arm-2")).read()).decode().splitlines()
    assert csv[0] == "episode,time_unix,time_utc,return,length,phase,client" and len(csv) == 4
    assert all(line.endswith(",train,arm-2") for line in csv[1:])


async def test_a_pooled_agents_curve_has_no_client_field_and_refuses_a_client(http):
    await play(http, "pole", episodes=1, steps=2)
    pole = (await agent_ids(http))["pole"]
    union = await (await get(http, f"/agents/{pole}/returns")).json()
    assert union["total"] == 1 and set(union["returns"][0]) == {"time", "value", "length", "phase"}
    csv = (await (await get(http, f"/agents/{pole}/returns.csv")).read()).decode().splitlines()
    assert csv[0] == "episode,time_unix,time_utc,return,length,phase"
    error = await (await get(http, f"/agents/{pole}/returns?client=arm-1", status=400)).json()
    assert "pooled" in error["error"]


async def test_unknown_and_bad_client_names_are_refused_naming_the_known_ones(http):
    await play(http, "arms", episodes=1, steps=2, client="arm-1")
    await play(http, "arms", episodes=1, steps=2, client="arm-2")
    arms = (await agent_ids(http))["arms"]
    for path in (f"/agents/{arms}/returns?client=arm-9", f"/agents/{arms}/export?client=arm-9",
                 f"/agents/{arms}/export?format=onnx&client=arm-9", f"/agents/{arms}/returns.csv?client=arm-9"):
        error = await (await get(http, path, status=404)).json()
        assert "no client 'arm-9'" in error["error"] and "its clients: arm-1, arm-2" in error["error"], error
    error = await (await get(http, f"/agents/{arms}/returns?client=../x", status=400)).json()
    assert "'client' must be" in error["error"]


async def test_one_clients_model_is_exported_as_sb3_and_as_its_own_networks_onnx(http):
    await play(http, "arms", episodes=3, steps=5, client="arm-1")
    await play(http, "arms", episodes=1, steps=5, client="arm-2")
    arms = (await agent_ids(http))["arms"]
    response = await get(http, f"/agents/{arms}/export?client=arm-2")
    assert 'filename="tests-arms-arm-2-model.zip"' in response.headers["Content-Disposition"]
    with zipfile.ZipFile(io.BytesIO(await response.read())) as archive:
        state = json.loads(archive.read("shepherd.json"))
    assert state["schedule"]["steps"] == 5  # arm-2's own counters, not arm-1's

    response = await get(http, f"/agents/{arms}/export?format=onnx&client=arm-1")
    model = onnx.load_from_string(await response.read())
    info = metadata(model)
    assert info["client"] == "arm-1" and info["advice"] == ADVICE_LEFT_OUT and info["agent"] == "arms"
    assert info["policy_version"] == 1  # arm-1 learned once (15 steps, 8 per update); arm-2 (5 steps) never
    # the file's greedy action is arm-1's own network's, as its SB3 zip gives it
    zipped = await (await get(http, f"/agents/{arms}/export?client=arm-1")).read()
    sb3 = PPO.load(io.BytesIO(zipped), device="cpu")
    observations = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    onnx_actions = session.run(None, {name: observations})[0]
    sb3_actions, _ = sb3.predict(observations, deterministic=True)
    assert onnx_actions.tolist() == sb3_actions.tolist()


async def test_metrics_and_health_count_advised_clients(http):
    await play(http, "arms", episodes=1, steps=4, client="arm-1")
    await play(http, "arms", episodes=2, steps=3, client="arm-2")
    await play(http, "pole", episodes=1, steps=2)
    text = await (await http.get("/metrics")).text()
    assert 'shepherd_agent_up{agent="tests/arms",client="arm-1"} 1.0' in text
    assert 'shepherd_agent_up{agent="tests/pole",client=""} 1.0' in text
    assert 'shepherd_agent_steps_total{agent="tests/arms",client="arm-2",phase="train"} 6.0' in text
    assert 'shepherd_agent_episodes_total{agent="tests/arms",client="arm-1",phase="train"} 1.0' in text
    health = await (await http.get("/shepherd/health")).json()
    assert health["agents"] == {"serving": 3, "failed": 0, "restoring": 0, "long_updates": 0}  # pole, and arms' two clients


async def test_the_progress_display_has_a_line_per_client_and_the_agents_sums(http):
    from shepherd.cli.progress import agent_stats, learner_stats

    await play(http, "arms", episodes=1, steps=4, client="arm-1")
    await play(http, "arms", episodes=2, steps=3, client="arm-2")
    ids = await agent_ids(http)
    stats = learner_stats(http.graph)
    assert set(stats) == {ids["pole"], (ids["arms"], "arm-1"), (ids["arms"], "arm-2")}
    assert stats[(ids["arms"], "arm-2")].agent == "arms/arm-2" and stats[(ids["arms"], "arm-2")].steps == 6
    summed = agent_stats(http.graph, ids["arms"])
    assert (summed.agent, summed.steps, summed.episodes, summed.phase) == ("arms", 10, 3, "train")
