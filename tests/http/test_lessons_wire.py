"""Lessons through the real aiohttp app (issue 38, docs/lessons.md): the configs announced before each episode and
repeated on its first reply (single, vector and client-acting sessions), every episode's lesson and config
recorded with its return (returns.jsonl, the admin API, the CSV), advancing after K evaluations in a row,
the lesson checkpointed and restored, moved by hand, and the validation target judged in the last lesson only."""

from __future__ import annotations

import asyncio
import csv
import io
import json

import pytest

from shepherd.client.connection import configs_of
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.graph.schedule import EvaluationResult
from shepherd.graph.preset import PresetValidation
from shepherd.graph.validation import judge
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app

N = 3
LESSONS = [
    {"name": "easy", "config": {"length": 0.25, "force_mag": {"choice": [8.0, 12.0]}},
     "until": {"evaluation_return": 3, "evaluations": 2}},
    {"name": "varied", "config": {"length": {"uniform": [0.4, 0.8]}}},
]
OBS = [0.01, -0.02, 0.03, 0.04]


def graph_manager(lessons=LESSONS, every=10 ** 6, n_envs=1):
    parameters = {"n_envs": n_envs, "n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0}
    return GraphManager(owner="tests", agents=[AgentSpec("pole", "PPO", [[4], "-inf", "inf"], 2, parameters,
                                                         lessons=lessons)],
                        schedule=Schedule(steps_between_evaluation_periods=every, evaluation_episodes=1))


async def make_client(aiohttp_client, tmp_path, graph=None):
    app = create_app(ServerConfig(graph or graph_manager(), tmp_path / "data"))
    client = await aiohttp_client(app)
    client.apikey = app[CREATED_KEYS]["pole"]
    return client


async def post(client, path, body, status=200):
    response = await client.post(path, json=body)
    assert response.status == status, await response.text()
    return await response.json()


async def login(client, **extra):
    return await post(client, "/shepherd/login_user/", {"apikey": client.apikey, **extra})


async def episode(client, key, steps=3, seq=None):
    """One episode of ``steps`` actions, reward 1 each: the replies to its steps (the last ends it)."""
    replies = [await post(client, "/shepherd/env/", {"session_key": key, "obs": OBS, "reward": 0.0, "done": False})]
    for t in range(steps):
        replies.append(await post(client, "/shepherd/env/", {"session_key": key, "obs": OBS, "reward": 1.0,
                                                             "done": t == steps - 1}))
    return replies


def runtime(client):
    return client.server.app[GRAPH].runtime()


def admin(client):
    return {"Authorization": f"Bearer {client.apikey}"}  # an agent's key sees its own agent


async def test_a_single_session_is_told_each_episodes_config_before_it_starts_and_every_return_keeps_it(
        aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path)
    opened = await login(client)
    announced = opened["next_episode_config"]
    assert announced["length"] == 0.25 and announced["force_mag"] in (8.0, 12.0)
    key = opened["session_key"]
    told = []
    for _ in range(4):
        first, middle, _, last = await episode(client, key)
        assert first["episode_config"] == announced and first["lesson"] == "easy"  # its own first reply repeats it
        assert "episode_config" not in middle and "next_episode_config" not in middle and "lesson" not in middle
        assert set(last) == {"action", "next_episode_config"} and last["action"] is None
        told.append(announced)
        announced = last["next_episode_config"]
    assert {config["force_mag"] for config in told} <= {8.0, 12.0}
    lines = [json.loads(line) for line in (tmp_path / "data" / "agents" / "1" / "returns.jsonl").read_text().splitlines()]
    assert [(line["lesson"], line["config"]) for line in lines] == [("easy", config) for config in told]
    agent_id = runtime(client).record.id
    reply = await (await client.get(f"/shepherd/admin/api/agents/{agent_id}/returns", headers=admin(client))).json()
    assert [(r["lesson"], r["config"]) for r in reply["returns"]] == [("easy", config) for config in told]
    text = await (await client.get(f"/shepherd/admin/api/agents/{agent_id}/returns.csv", headers=admin(client))).text()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [(row["lesson"], json.loads(row["config"])) for row in rows] == [("easy", config) for config in told]
    view = await (await client.get(f"/shepherd/admin/api/agents/{agent_id}", headers=admin(client))).json()
    assert view["lesson"] == "easy" and [lesson["name"] for lesson in view["lessons"]] == ["easy", "varied"]


async def test_an_agent_without_lessons_speaks_the_protocol_as_before(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path, graph_manager(lessons=None))
    opened = await login(client)
    assert "next_episode_config" not in opened
    first, _, _, last = await episode(client, opened["session_key"])
    assert set(first) == {"action", "policy_version"} and last == {"action": None}
    line = json.loads((tmp_path / "data" / "agents" / "1" / "returns.jsonl").read_text().splitlines()[0])
    assert set(line) == {"time", "value", "length", "phase"}
    vector = await login(client, n_envs=N)
    assert "next_episode_configs" not in vector
    assert "shepherd_agent_lesson{" not in await (await client.get("/metrics")).text()


def vector_body(key, t, ended=()):
    return {"session_key": key, "obs": [OBS] * N, "reward": [0.0 if t == 0 else 1.0] * N,
            "terminated": [i in ended for i in range(N)], "truncated": [False] * N,
            "final_obs": [OBS if i in ended else None for i in range(N)]}


async def test_a_vector_session_gets_each_envs_next_config_and_the_configs_of_the_episodes_that_started(
        aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path, graph_manager(n_envs=N))
    opened = await login(client, n_envs=N)
    pending = configs_of(opened, "next_episode_configs")
    assert len(pending) == N and all(config["length"] == 0.25 for config in pending)
    key = opened["session_key"]
    first = await post(client, "/shepherd/env/", vector_body(key, 0))
    assert configs_of(first, "episode_configs") == pending  # every env's first episode: the login reply's configs
    assert all(config is not None for config in configs_of(first, "next_episode_configs"))
    pending = configs_of(first, "next_episode_configs")
    quiet = await post(client, "/shepherd/env/", vector_body(key, 1))
    assert quiet["episode_configs"] == [None] * N and quiet["next_episode_configs"] == [None] * N
    assert quiet["configs"] == []
    ends = await post(client, "/shepherd/env/", vector_body(key, 2, ended=(1,)))
    assert configs_of(ends, "episode_configs") == [None, pending[1], None]  # env 1 reset with the config it was told
    assert ends["next_episode_configs"][0] is None and ends["next_episode_configs"][2] is None
    assert ends["next_episode_configs"][1] is not None
    line = json.loads((tmp_path / "data" / "agents" / "1" / "returns.jsonl").read_text().splitlines()[0])
    assert line["lesson"] == "easy" and line["config"] == configs_of(opened, "next_episode_configs")[1]


async def test_a_client_acting_session_gets_each_envs_config_for_the_next_block(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path, graph_manager(n_envs=2))
    opened = await login(client, acting="client", n_envs=2)
    configs = configs_of(opened, "next_episode_configs")
    assert opened["lesson"] == "easy" and len(configs) == 2
    assert all(config["length"] == 0.25 for config in configs)


async def test_a_reply_sends_each_distinct_config_once_however_many_envs_it_has(aiohttp_client, tmp_path):
    """Issue 48, H2: a lesson of constants near the size cap and a login of 256 envs: the reply carries the
    config once (it repeated it per env: 256 times its size), every env's entry pointing to it."""
    big = [{"name": "big", "config": {"table": ["x" * 60] * 200}}]
    client = await make_client(aiohttp_client, tmp_path, graph_manager(lessons=big, n_envs=2))
    response = await client.post("/shepherd/login_user/", json={"apikey": client.apikey, "n_envs": 256})
    assert response.status == 200, await response.text()
    opened = await response.json()
    assert len(opened["configs"]) == 1 and opened["next_episode_configs"] == [0] * 256
    assert len(await response.read()) < 2 * len(json.dumps(big[0]["config"]))
    first = await post(client, "/shepherd/env/", {"session_key": opened["session_key"], "obs": [OBS] * 256,
                                                  "reward": [0.0] * 256, "terminated": [False] * 256,
                                                  "truncated": [False] * 256})
    assert len(first["configs"]) == 1 and first["episode_configs"] == [0] * 256


async def test_the_agent_advances_after_k_evaluations_in_a_row_and_the_checkpoint_keeps_its_lesson(
        aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path, graph_manager(every=3))
    state = runtime(client)
    key = (await login(client))["session_key"]
    for _ in range(8):
        first, *_, last = await episode(client, key)
        assert first["lesson"] == "easy"
        if state.lessons.name == "varied":
            break
    # train, evaluate (3 >= 3: 1 in a row), train, evaluate (2 in a row): advanced
    assert [result.lesson for result in state.evaluations] == ["easy", "easy"]
    assert [result.final_lesson for result in state.evaluations] == [False, False]
    assert state.lessons.name == "varied" and state.metric_values()["shepherd/lesson"] == 1
    exposed = [line for line in (await (await client.get("/metrics")).text()).splitlines()
               if line.startswith("shepherd_agent_lesson{")]
    assert len(exposed) == 1 and 'lesson="varied"' in exposed[0] and 'index="1"' in exposed[0]
    assert exposed[0].endswith(" 1.0")
    first, *_ = await episode(client, key)  # the episode that ended the evaluation announced the new lesson's
    assert first["lesson"] == "varied" and 0.4 <= first["episode_config"]["length"] <= 0.8
    await asyncio.wrap_future(state.checkpoint())
    graph = client.server.app[GRAPH]
    resumed = await asyncio.to_thread(graph.build_agent, state.record, True)
    try:
        assert resumed.runtime.lessons.name == "varied"
    finally:
        await asyncio.to_thread(resumed.discard)


async def test_a_lesson_is_moved_by_hand_through_the_admin_api(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path)
    agent_id = runtime(client).record.id
    path = f"/shepherd/admin/api/agents/{agent_id}/lesson"
    response = await client.post(path, json={"lesson": "hard"}, headers=admin(client))
    assert response.status == 400 and "its lessons: easy, varied" in (await response.json())["error"]
    response = await client.post(path, json={"lesson": "varied"}, headers=admin(client))
    assert response.status == 200, await response.text()
    assert runtime(client).lessons.name == "varied"
    opened = await login(client)
    assert 0.4 <= opened["next_episode_config"]["length"] <= 0.8
    await asyncio.wrap_future(runtime(client).checkpoints.pending)


@pytest.mark.parametrize("final, mean, code", [(True, 500.0, 0), (False, 500.0, None), (False, 10.0, 1)])
def test_the_validation_target_applies_to_the_last_lesson_only(final, mean, code):
    validation = PresetValidation("CartPole-v1", target_return=475, max_steps=1000)
    steps = 1000 if code == 1 else 10
    result = EvaluationResult(1, steps, mean, (mean,), lesson="x", final_lesson=final)
    assert judge(validation, result).code == code


async def test_the_admin_api_refuses_a_config_over_the_size_cap_and_stores_nothing(api):
    """Issue 48, H2: the cap holds for agents created through the admin API too (400, nothing stored)."""
    big = [{"name": "big", "config": {"table": ["x" * 100] * 200}}]
    reply = await api.add_agent("tests", "huge", lessons=big, status=400)
    assert "lessons[0].config" in reply["error"] and "16,384" in reply["error"]
    assert "huge" not in [agent["name"] for agent in await api.get_json("/agents")]
