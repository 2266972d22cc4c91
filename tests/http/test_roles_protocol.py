"""Environments with roles through the real aiohttp app (docs/protocol.md, "Environments with roles"): the login
with an environment's key, steps by role under each kind of turns, the refusals that name the role and field,
retries with the same seq, masks by role, each role's episode recorded on its agent, and an environment's keys
listed and revoked through the admin API as an agent's are."""

from __future__ import annotations

import asyncio

import pytest

from shepherd.environments import EnvironmentSpec
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app
from shepherd.http.state import CREATED_ADMIN_TOKEN

OBS = [[2], -1.0, 1.0]
TINY = {"n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0, "policy_kwargs": {"net_arch": [8]}}
A, B = [0.0, 0.5], [0.5, 0.0]


def graph_manager() -> GraphManager:
    return GraphManager(owner="tests", agents=[
        AgentSpec("raider", "PPO", OBS, 2, TINY), AgentSpec("guard", "MaskablePPO", OBS, 3, TINY)],
        schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1),
        environments=(EnvironmentSpec("defence", {"attacker": "raider", "defender": "guard"}, "simultaneous",
                                      {"red": ("attacker",), "blue": ("defender",)}),
                      EnvironmentSpec("duel", {"first": "raider", "second": "guard"}, "alternate"),
                      EnvironmentSpec("free", {"x": "raider", "y": "raider"}, "any")))


@pytest.fixture
async def client(aiohttp_client, tmp_path):
    app = create_app(ServerConfig(graph_manager(), tmp_path / "data"))
    client = await aiohttp_client(app)
    client.keys = app[CREATED_KEYS]
    client.admin = {"Authorization": f"Bearer {app[CREATED_ADMIN_TOKEN]}"}
    client.graph = app[GRAPH]
    return client


async def post(client, path, body, status=200):
    response = await client.post(path, json=body)
    assert response.status == status, await response.text()
    return await response.json()


async def login(client, environment):
    return await post(client, "/shepherd/login_user/", {"apikey": client.keys[f"environment {environment}"]})


async def step(client, key, status=200, **body):
    return await post(client, "/shepherd/env/", {"session_key": key, **body}, status)


async def test_the_login_names_the_environment_its_turns_and_each_roles_agent_and_spaces(client):
    opened = await login(client, "defence")
    assert set(opened) == {"ok", "session_key", "environment", "turns", "roles"}
    assert opened["environment"] == "defence" and opened["turns"] == "simultaneous"
    assert opened["roles"] == {"attacker": {"agent": "raider", "observation_space": OBS, "action_space": 2},
                               "defender": {"agent": "guard", "observation_space": OBS, "action_space": 3}}


async def test_simultaneous_turns_answer_every_live_role_and_refuse_naming_the_role_and_field(client):
    key = (await login(client, "defence"))["session_key"]
    error = (await step(client, key, 400, obs={"attacker": A}))["error"]
    assert "obs.defender" in error and "missing" in error
    error = (await step(client, key, 400, obs={"attacker": A, "defender": B, "spy": A}))["error"]
    assert "obs.spy" in error and "no such role" in error
    error = (await step(client, key, 400, obs={"attacker": [0.0], "defender": B}))["error"]
    assert "obs.attacker" in error
    error = (await step(client, key, 400, obs={"attacker": A, "defender": B}, action_mask={"attacker": [1, 1]}))["error"]
    assert "action_mask.attacker" in error and "takes no masks" in error
    reply = await step(client, key, obs={"attacker": A, "defender": B}, action_mask={"defender": [0, 0, 1]})
    assert set(reply) == {"actions", "policy_versions"}
    assert reply["actions"]["attacker"] in (0, 1) and reply["actions"]["defender"] == 2  # the mask holds
    assert reply["policy_versions"] == {"attacker": 0, "defender": 0}
    # the attacker ends: it sends its last observation once and gets no action; the defender goes on alone
    reply = await step(client, key, obs={"attacker": A, "defender": B}, reward={"attacker": 1.0, "defender": -1.0},
                       terminated={"attacker": True})
    assert set(reply["actions"]) == {"defender"}
    error = (await step(client, key, 400, obs={"attacker": A, "defender": B}))["error"]
    assert "obs.attacker" in error and "ended" in error
    error = (await step(client, key, 400, obs={"defender": B}, outcome={"attacker": 1}))["error"]
    assert error.startswith("outcome")  # the episode has not ended
    error = (await step(client, key, 400, obs={"defender": B}, terminated={"defender": True},
                        outcome={"nobody": 1}))["error"]
    assert "outcome.nobody" in error
    reply = await step(client, key, obs={"defender": B}, reward={"defender": 2.0}, terminated={"defender": True},
                       outcome={"attacker": 1, "defender": 0})
    assert reply == {"actions": {}, "policy_versions": {}}
    reply = await step(client, key, obs={"attacker": A, "defender": B})  # the next episode, both roles again
    assert set(reply["actions"]) == {"attacker", "defender"}
    level = client.graph.session(key).level
    assert level.last_outcome == {"attacker": 1.0, "defender": 0.0}


async def test_alternate_turns_go_round_in_order_and_a_waiting_roles_rewards_are_summed(client):
    key = (await login(client, "duel"))["session_key"]
    error = (await step(client, key, 400, obs={"second": B}))["error"]
    assert "obs.second" in error and "out of turn" in error and "first's turn" in error
    assert set((await step(client, key, obs={"first": A}))["actions"]) == {"first"}
    error = (await step(client, key, 400, obs={"first": A}))["error"]
    assert "obs.first" in error and "second's turn" in error
    await step(client, key, obs={"second": B}, reward={"first": 0.25})
    await step(client, key, obs={"first": A}, reward={"first": 0.5, "second": 1.0})
    await step(client, key, obs={"second": B}, reward={"first": 2.0})  # held for the first's end
    await step(client, key, obs={"first": A, "second": B}, reward={"first": 0.0, "second": 3.0},
               terminated={"first": True, "second": True})
    assert set((await step(client, key, obs={"first": A}))["actions"]) == {"first"}  # the first begins again
    await step(client, key, obs={"second": B})
    # on the first's turn the first ends: the turn skips it, so the second may act in the same step
    reply = await step(client, key, obs={"first": A, "second": B}, terminated={"first": True})
    assert set(reply["actions"]) == {"second"}
    error = (await step(client, key, 400, obs={"first": A}))["error"]
    assert "obs.first" in error and "ended" in error
    assert set((await step(client, key, obs={"second": B}))["actions"]) == {"second"}  # alone now, each step
    await step(client, key, obs={"second": B}, terminated={"second": True})
    graph = client.graph
    barrier = [graph.runtime(name).checkpoint() for name in ("raider", "guard")]
    await asyncio.to_thread(lambda: [future.result(30) for future in barrier])
    store = graph.store
    assert [r.value for r in store.returns(graph.runtime("raider").record.id)] == [0.75 + 2.0, 0.0]
    assert [r.value for r in store.returns(graph.runtime("guard").record.id)] == [4.0, 0.0]


async def test_any_turns_take_one_live_role_per_step(client):
    key = (await login(client, "free"))["session_key"]
    error = (await step(client, key, 400, obs={"x": A, "y": B}))["error"]
    assert "obs.y" in error and "one role acts per step" in error
    assert set((await step(client, key, obs={"y": B}))["actions"]) == {"y"}
    assert set((await step(client, key, obs={"y": B}))["actions"]) == {"y"}
    assert set((await step(client, key, obs={"x": A}))["actions"]) == {"x"}


async def test_a_step_sent_again_with_its_seq_gets_the_same_reply_once(client):
    key = (await login(client, "duel"))["session_key"]
    first = await step(client, key, obs={"first": A}, seq=1)
    assert await step(client, key, obs={"first": A}, seq=1) == first  # not out of turn: the same step, once
    error = (await step(client, key, 409, obs={"first": B}, seq=1))["error"]
    assert "seq" in error
    await step(client, key, obs={"second": B}, reward={"first": 1.0}, seq=2)


async def test_an_agents_key_is_not_an_environments_and_outcome_is_an_environments_field(client):
    opened = await post(client, "/shepherd/login_user/", {"apikey": client.keys["raider"]})
    assert opened["agent"] == "raider"
    error = (await step(client, opened["session_key"], 400, obs=A, reward=0.0, outcome={"raider": 1}))["error"]
    assert "outcome" in error


async def test_a_vector_session_steps_n_copies_with_their_own_turns_and_errors_name_the_copy(client):
    opened = await post(client, "/shepherd/login_user/", {"apikey": client.keys["environment duel"], "n_envs": 2})
    assert opened["n_envs"] == 2 and opened["environment"] == "duel"
    key = opened["session_key"]
    reply = await step(client, key, envs=[{"obs": {"first": A}}, {"obs": {"first": B}}], seq=1)
    assert [set(item["actions"]) for item in reply["envs"]] == [{"first"}, {"first"}]
    error = (await step(client, key, 400, envs=[{"obs": {"second": A}}, {"obs": {"first": B}}], seq=2))["error"]
    assert error.startswith("envs[1].obs.first") and "out of turn" in error  # nothing changed in copy 0 either
    reply = await step(client, key, envs=[{"obs": {"second": A}, "reward": {"first": 1.0}},
                                          {"obs": {"second": B}}], seq=2)
    assert [set(item["actions"]) for item in reply["envs"]] == [{"second"}, {"second"}]
    error = (await step(client, key, 400, envs=[{"obs": {"first": A}}], seq=3))["error"]
    assert "envs" in error and "2 copies" in error
    error = (await step(client, key, 400, obs={"first": A}, seq=3))["error"]
    assert "envs" in error


async def admin(client, method, path, body=None, status=200):
    response = await client.request(method, "/shepherd/admin/api" + path, json=body, headers=client.admin)
    assert response.status == status, await response.text()
    return await response.json()


async def test_an_environments_key_is_listed_and_revoked_as_an_agents_its_sessions_ending_alike(client):
    made = await admin(client, "POST", "/environments/keys", {"environment": "tests/duel", "label": "robot"}, 201)
    agents_key = await admin(client, "POST", "/agents/1/keys", {"label": "to revoke"}, 201)
    listed = await admin(client, "GET", "/environments/keys?environment=tests/duel")
    assert [(k["environment"], k["label"], k["revoked"]) for k in listed] == [
        ("tests/duel", "created by preset", False), ("tests/duel", "robot", False)]
    assert listed[1]["id"] == made["id"] and "key" not in listed[1] and "hash" not in listed[1]
    assert len(await admin(client, "GET", "/environments/keys")) == 4  # the preset made one per environment
    assert "no agent or environment 'tests/nowhere'" in (
        await admin(client, "GET", "/environments/keys?environment=tests/nowhere", status=404))["error"]
    sessions = {}
    for name, key in (("revoked", made["key"]), ("kept", client.keys["environment duel"]),
                      ("agent", agents_key["key"])):
        sessions[name] = (await post(client, "/shepherd/login_user/", {"apikey": key}))["session_key"]
    assert set((await step(client, sessions["revoked"], obs={"first": A}))["actions"]) == {"first"}

    revoked = await admin(client, "POST", f"/environments/keys/{made['id']}/revoke", {})
    assert revoked == {**listed[1], "revoked": True}
    await admin(client, "POST", f"/keys/{agents_key['id']}/revoke", {})
    # the revoked environment key's session ended as the revoked agent key's did; the other key's goes on
    ended = await step(client, sessions["revoked"], 401, obs={"second": B})
    assert ended == await post(client, "/shepherd/env/", {"session_key": sessions["agent"], "obs": A, "reward": 0.0,
                                                          "done": False}, 401)
    assert set((await step(client, sessions["kept"], obs={"first": A}))["actions"]) == {"first"}
    refused = await post(client, "/shepherd/login_user/", {"apikey": made["key"]}, 401)
    assert refused == await post(client, "/shepherd/login_user/", {"apikey": agents_key["key"]}, 401)
    assert [k["revoked"] for k in await admin(client, "GET", "/environments/keys?environment=duel")] == [False, True]
    assert "no environment key with id 99" in (
        await admin(client, "POST", "/environments/keys/99/revoke", {}, 404))["error"]


SEEN: list = []


def masked_choice(obs, mask):
    """A scripted role of a game with masks: the last action its mask allows (and what it was handed, kept)."""
    SEEN.append((obs, mask))
    return max(index for index, allowed in enumerate(mask) if allowed)


async def test_a_scripted_role_is_handed_its_mask_with_its_observation(aiohttp_client, tmp_path):
    # PettingZoo's classic games send every player's mask with its observation: a scripted player of such a
    # game gets it, unchecked as its observation is (its spaces are unknown)
    graph = GraphManager(owner="tests", agents=[AgentSpec("guard", "MaskablePPO", OBS, 3, TINY)],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1),
                         environments=(EnvironmentSpec("game", {"first": "guard", "second": f"{__name__}:masked_choice"},
                                                       "alternate"),))
    app = create_app(ServerConfig(graph, tmp_path / "data"))
    client = await aiohttp_client(app)
    key = (await post(client, "/shepherd/login_user/", {"apikey": app[CREATED_KEYS]["environment game"]}))["session_key"]
    assert (await step(client, key, obs={"first": A}, action_mask={"first": [0, 1, 0]}))["actions"] == {"first": 1}
    SEEN.clear()
    reply = await step(client, key, obs={"second": [[0, 1]]}, action_mask={"second": [1, 1, 0, 0]})
    assert reply["actions"] == {"second": 1} and SEEN == [([[0, 1]], [1, 1, 0, 0])]
