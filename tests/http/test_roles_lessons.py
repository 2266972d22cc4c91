"""Lessons' configs in the replies of an environment with roles, through the real aiohttp app (docs/lessons.md,
docs/protocol.md "Environments with roles"): as a single-env session's, by role (the roles whose agents have
lessons): the first episode's in the login reply, the next one's in the reply that ends an episode, the episode's
again with its lessons in the reply to its first step; each role's episode recorded with the config told for it;
retries get the same fields; a vector session's copies each their own."""

from __future__ import annotations

import asyncio

import pytest

from shepherd.environments import EnvironmentSpec
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app

OBS = [[2], -1.0, 1.0]
TINY = {"n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0, "policy_kwargs": {"net_arch": [8]}}
LESSONS = [{"name": "varied", "config": {"speed": {"uniform": [0.0, 1.0]}}}]
A, B = [0.0, 0.5], [0.5, 0.0]


def graph_manager() -> GraphManager:
    return GraphManager(owner="tests", agents=[
        AgentSpec("raider", "PPO", OBS, 2, TINY, lessons=LESSONS), AgentSpec("guard", "PPO", OBS, 2, TINY)],
        schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1),
        environments=(EnvironmentSpec("duel", {"first": "raider", "second": "guard", "third": "raider"},
                                      "alternate"),))


@pytest.fixture
async def client(aiohttp_client, tmp_path):
    app = create_app(ServerConfig(graph_manager(), tmp_path / "data"))
    client = await aiohttp_client(app)
    client.keys = app[CREATED_KEYS]
    client.graph = app[GRAPH]
    return client


async def post(client, path, body, status=200):
    response = await client.post(path, json=body)
    assert response.status == status, await response.text()
    return await response.json()


async def test_each_roles_config_is_told_before_its_episode_and_again_at_its_first_step(client):
    opened = await post(client, "/shepherd/login_user/", {"apikey": client.keys["environment duel"]})
    key = opened["session_key"]
    told = opened["next_episode_config"]
    assert set(told) == {"first", "third"}  # the roles whose agent has lessons; guard has none
    assert told["first"] != told["third"]  # each role's episode draws its own (one agent, two roles)
    seq = 0

    async def step(**fields):
        nonlocal seq
        seq += 1
        return await post(client, "/shepherd/env/", {"session_key": key, "seq": seq, **fields})

    recorded = []
    for _ in range(3):
        first = await step(obs={"first": A})
        assert first["episode_config"] == told and first["lesson"] == {"first": "varied", "third": "varied"}
        recorded.append(told)
        middle = [await step(obs={"second": B}), await step(obs={"third": A})]
        assert all("episode_config" not in reply and "next_episode_config" not in reply for reply in middle)
        # the first role ends before the others: its next config is drawn, told when the environment's episode ends
        assert "next_episode_config" not in await step(obs={"first": A}, reward={"first": 1.0},
                                                       terminated={"first": True})
        ending = await step(obs={"second": B, "third": A}, reward={"second": 1.0, "third": 1.0},
                            terminated={"second": True, "third": True})
        assert ending["actions"] == {} and set(ending["next_episode_config"]) == {"first", "third"}
        assert ending["next_episode_config"] != told
        assert await post(client, "/shepherd/env/", {"session_key": key, "seq": seq, "obs": {"second": B, "third": A},
                                                     "reward": {"second": 1.0, "third": 1.0},
                                                     "terminated": {"second": True, "third": True}}) == ending  # retry
        told = ending["next_episode_config"]
    graph = client.graph
    runtime = graph.runtime("raider")
    await asyncio.to_thread(lambda: runtime.checkpoint().result(30))
    configs = [record.config for record in graph.store.returns(runtime.record.id)]
    assert sorted(map(str, configs)) == sorted(str(setup[role]) for setup in recorded for role in ("first", "third"))
    assert all(record.config is None for record in graph.store.returns(graph.runtime("guard").record.id))


async def test_a_vector_sessions_copies_are_told_their_own(client):
    opened = await post(client, "/shepherd/login_user/", {"apikey": client.keys["environment duel"], "n_envs": 2})
    first, second = opened["envs"]
    assert set(first["next_episode_config"]) == set(second["next_episode_config"]) == {"first", "third"}
    assert first["next_episode_config"] != second["next_episode_config"]
    reply = await post(client, "/shepherd/env/", {"session_key": opened["session_key"],
                                                  "envs": [{"obs": {"first": A}}, {"obs": {"first": B}}]})
    assert [item["episode_config"] for item in reply["envs"]] == [first["next_episode_config"],
                                                                   second["next_episode_config"]]
    assert "episode_config" not in reply and "next_episode_config" not in reply


async def test_an_environment_whose_agents_have_no_lessons_says_nothing_of_configs(aiohttp_client, tmp_path):
    graph = GraphManager(owner="tests", agents=[AgentSpec("guard", "PPO", OBS, 2, TINY)],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1),
                         environments=(EnvironmentSpec("solo", {"only": "guard"}, "simultaneous"),))
    app = create_app(ServerConfig(graph, tmp_path / "data"))
    client = await aiohttp_client(app)
    opened = await post(client, "/shepherd/login_user/", {"apikey": app[CREATED_KEYS]["environment solo"]})
    assert "next_episode_config" not in opened
    body = {"session_key": opened["session_key"], "obs": {"only": A}}
    assert set(await post(client, "/shepherd/env/", body)) == {"actions", "policy_versions"}
    ended = await post(client, "/shepherd/env/", {**body, "terminated": {"only": True}})
    assert set(ended) == {"actions", "policy_versions"}


def test_the_roles_client_keeps_what_the_replies_told_by_role(tmp_path):
    from shepherd.client.roles import RolesClient
    from tests.conftest import ServerThread

    graph = graph_manager()
    thread = ServerThread(ServerConfig(graph, tmp_path / "data", requests_per_second_per_key=None)).start_and_wait()
    client = RolesClient(thread.server.url, thread.server.created_keys["environment duel"])
    try:
        told = client.login()["next_episode_config"]
        assert client.next_episode_config == told
        client.step({"first": A})
        assert client.episode_config == told and client.lesson == {"first": "varied", "third": "varied"}
        client.step({"second": B})
        client.step({"first": A, "second": B, "third": A}, terminated={"first": True, "second": True, "third": True})
        assert set(client.next_episode_config) == {"first", "third"} and client.next_episode_config != told
        client.logout()
    finally:
        client.close()
        thread.stop()
