"""Steps of an environment with roles that are refused, or fail, leave the session as it was (docs/protocol.md,
"Environments with roles"): a scripted role's function that raises on what the client sent refuses the step
before anything changes, in one copy of a vector session as in a single one; fields these steps do not have are
refused, inside `envs` items too; a vector step of binary tensors retries with its `seq`."""

from __future__ import annotations

from shepherd.environments import EnvironmentSpec
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app
from tests.binary_bodies import request

OBS = [[2], -1.0, 1.0]
TINY = {"n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0, "policy_kwargs": {"net_arch": [8]}}
A, B = [0.0, 0.5], [0.5, 0.0]
PICKY = "tests.http.test_roles_refusals:picky"


def picky(obs, mask):
    """A scripted player that takes only two numbers (its role's observation is not checked by a space)."""
    if not (isinstance(obs, list) and len(obs) == 2):
        raise ValueError(f"expected two numbers, got {obs!r}")
    return 1


async def server(aiohttp_client, tmp_path):
    graph = GraphManager(owner="tests", agents=[AgentSpec("raider", "PPO", OBS, 2, TINY)],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1),
                         environments=(EnvironmentSpec("versus", {"a": "raider", "s": PICKY}, "alternate"),))
    app = create_app(ServerConfig(graph, tmp_path / "data"))
    client = await aiohttp_client(app)
    client.keys, client.graph = app[CREATED_KEYS], app[GRAPH]
    return client


async def post(client, body, status=200):
    path = "/shepherd/env/" if "session_key" in body else "/shepherd/login_user/"
    response = await client.post(path, json=body)
    assert response.status == status, await response.text()
    return await response.json()


async def login(client, **fields):
    return (await post(client, {"apikey": client.keys["environment versus"], **fields}))["session_key"]


async def test_a_scripted_role_that_raises_refuses_the_step_before_anything_changes(aiohttp_client, tmp_path):
    client = await server(aiohttp_client, tmp_path)
    key = await login(client)
    assert (await post(client, {"session_key": key, "seq": 0, "obs": {"a": A}}))["actions"].keys() == {"a"}
    error = (await post(client, {"session_key": key, "seq": 1, "obs": {"s": "bad"}}, 400))["error"]
    assert error.startswith("obs.s:") and "picky" in error and "ValueError" in error
    # nothing changed: it is still s's turn, and seq 1 is a new step (not a retry of the refused one)
    assert (await post(client, {"session_key": key, "seq": 1, "obs": {"s": B}}))["actions"] == {"s": 1}
    await post(client, {"session_key": key, "seq": 2, "obs": {"a": A}, "reward": {"a": 1.0}})
    assert client.graph.runtime("raider").tracker.steps == 1  # a's transition from its first act to its second


def forbidden(obs, mask):
    """A scripted player that plays what its mask forbids, if it forbids anything (a bug of the preset's function)."""
    return ([index for index, allowed in enumerate(mask) if not allowed] or [0])[0]


async def test_a_scripted_roles_action_its_mask_forbids_is_a_500_and_nothing_is_taken(aiohttp_client, tmp_path):
    """It went to the client as it was (a game's env ends on an illegal move): the preset's function is at fault,
    so a 500 (logged), not a 400 blaming the step; nothing was taken (the same seq is a new step)."""
    graph = GraphManager(owner="tests", agents=[AgentSpec("raider", "PPO", OBS, 2, TINY)],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1),
                         environments=(EnvironmentSpec("versus", {"a": "raider",
                                                                  "s": "tests.http.test_roles_refusals:forbidden"},
                                                       "alternate"),))
    app = create_app(ServerConfig(graph, tmp_path / "data"))
    client = await aiohttp_client(app)
    key = (await post(client, {"apikey": app[CREATED_KEYS]["environment versus"]}))["session_key"]
    await post(client, {"session_key": key, "seq": 0, "obs": {"a": A}})
    await post(client, {"session_key": key, "seq": 1, "obs": {"s": B}, "action_mask": {"s": [1, 0, 1]}}, 500)
    reply = await post(client, {"session_key": key, "seq": 1, "obs": {"s": B}, "action_mask": {"s": [1, 1, 1]}})
    assert reply["actions"] == {"s": 0}


async def test_in_a_vector_session_one_copys_raising_script_refuses_every_copys_step(aiohttp_client, tmp_path):
    client = await server(aiohttp_client, tmp_path)
    key = await login(client, n_envs=2)
    await post(client, {"session_key": key, "seq": 0, "envs": [{"obs": {"a": A}}, {"obs": {"a": B}}]})
    error = (await post(client, {"session_key": key, "seq": 1, "envs": [{"obs": {"s": A}}, {"obs": {"s": 7}}]},
                        400))["error"]
    assert error.startswith("envs[1].obs.s:")
    reply = await post(client, {"session_key": key, "seq": 1, "envs": [{"obs": {"s": A}}, {"obs": {"s": B}}]})
    assert [item["actions"] for item in reply["envs"]] == [{"s": 1}, {"s": 1}]
    reply = await post(client, {"session_key": key, "seq": 2, "envs": [{"obs": {"a": A}}, {"obs": {"a": B}}]})
    assert [set(item["actions"]) for item in reply["envs"]] == [{"a"}, {"a"}]
    assert client.graph.runtime("raider").tracker.steps == 2  # each copy's a: one transition, counted once


async def test_fields_that_roles_steps_do_not_have_are_refused_also_inside_envs(aiohttp_client, tmp_path):
    client = await server(aiohttp_client, tmp_path)
    key = await login(client)
    error = (await post(client, {"session_key": key, "obs": {"a": A}, "done": True}, 400))["error"]
    assert error.startswith("done:")
    key = await login(client, n_envs=1)
    error = (await post(client, {"session_key": key, "envs": [{"obs": {"a": A}, "rewards": {"a": 5}}]}, 400))["error"]
    assert error.startswith("envs[0].rewards:")


async def test_a_vector_step_of_binary_tensors_with_a_seq_is_taken_and_retried(aiohttp_client, tmp_path):
    client = await server(aiohttp_client, tmp_path)
    key = await login(client, n_envs=2)
    body = {"session_key": key, "seq": 0, "envs": [{"obs": {"a": A}}, {"obs": {"a": B}}]}
    first = await client.post("/shepherd/env/", **request(body, "binary"))
    assert first.status == 200, await first.text()
    again = await client.post("/shepherd/env/", **request(body, "binary"))  # a retry: the same reply, counted once
    assert again.status == 200 and await again.json() == await first.json()


async def test_a_retry_after_one_roles_learner_lost_the_step_asks_only_that_learner_again(aiohttp_client, tmp_path):
    """`LearnerUnavailable` (one agent's learner process died): the retry with the step's seq hands the step to
    that learner again; the other role's learner, which answered, is not sent its request twice."""
    from shepherd.agents import ActionFuture, LearnerUnavailable

    graph = GraphManager(owner="tests", agents=[AgentSpec("raider", "PPO", OBS, 2, TINY),
                                                AgentSpec("guard", "PPO", OBS, 2, TINY)],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1),
                         environments=(EnvironmentSpec("defence", {"attacker": "raider", "defender": "guard"},
                                                       "simultaneous"),))
    app = create_app(ServerConfig(graph, tmp_path / "data"))
    client = await aiohttp_client(app)
    sent: dict[str, list] = {"raider": [], "guard": []}
    for name in sent:
        learner = app[GRAPH].runtime(name).learner

        def submit(requests, learner=learner, calls=sent[name], original=learner.submit):
            calls.append([request.kind for request in requests])
            if learner is app[GRAPH].runtime("guard").learner and len(calls) == 1:  # the guard's process died
                lost = ActionFuture()
                lost.set_exception(LearnerUnavailable("the learner's process is restarting"))
                return lost
            return original(requests)

        learner.submit = submit
    key = (await post(client, {"apikey": app[CREATED_KEYS]["environment defence"]}))["session_key"]
    body = {"session_key": key, "seq": 0, "obs": {"attacker": A, "defender": B}}
    await post(client, body, 503)
    reply = await post(client, body)  # the retry
    assert set(reply["actions"]) == {"attacker", "defender"}
    assert len(sent["raider"]) == 1 and len(sent["guard"]) == 2  # the attacker's BEGIN once; the lost one again
