"""A step whose observation an off-policy agent's networks cannot take (issue 48's H1: 400, "the step was not
recorded") is refused before the session's level changes anything: the learner refused it only when it came to
act, by which time the level had counted it (its reward in the episode's return, its env step in the schedule),
ended and begun its episodes (a vector step's ended episode recorded, then recorded again when the client sent the
step anew), and a step ending an episode with one was answered 200 with its last transition dropped."""

from __future__ import annotations

from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app

DQN = {"batch_size": 8, "train_freq": 1, "buffer_size": 1000, "seed": 0}


async def server(aiohttp_client, tmp_path, **login):
    graph = GraphManager(owner="tests", agents=[AgentSpec("agent", "DQN", [[3], "-inf", "inf"], 2, DQN)],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, heatup_steps=0))
    app = create_app(ServerConfig(graph, tmp_path / "data"))
    client = await aiohttp_client(app)
    reply = await client.post("/shepherd/login_user/", json={"apikey": app[CREATED_KEYS]["agent"], **login})
    return client, app[GRAPH], (await reply.json())["session_key"]


async def post(client, body):
    response = await client.post("/shepherd/env/", json=body)
    return response.status, await response.json()


async def test_a_refused_step_is_neither_counted_nor_in_the_return_and_an_ending_one_is_refused(aiohttp_client,
                                                                                               tmp_path):
    client, graph, key = await server(aiohttp_client, tmp_path)
    runtime = graph.runtime()
    for obs, reward, done, seq in [([0, 0, 0], 0, False, 1), ([0, 1, 0], 1.0, False, 2)]:
        assert (await post(client, {"session_key": key, "obs": obs, "reward": reward, "done": done, "seq": seq}))[0] == 200
    status, reply = await post(client, {"session_key": key, "obs": [0, 1e30, 0], "reward": 100.0, "done": False,
                                        "seq": 3})
    assert status == 400 and "the step was not recorded" in reply["error"]
    assert runtime.tracker.steps == 1  # the second step's transition; not the refused one
    status, reply = await post(client, {"session_key": key, "obs": [0, 3, 0], "reward": 1.0, "done": True,
                                        "seq": 4, "terminated": True})
    assert status == 200
    assert [r.value for r in graph.store.returns(runtime.record.id)] == [2.0]  # 1 + 1, not 100 more
    for obs, reward, seq in [([0, 0, 0], 0, 5), ([0, 1, 0], 1.0, 6)]:
        await post(client, {"session_key": key, "obs": obs, "reward": reward, "done": False, "seq": seq})
    stored = runtime.learner.algorithm.model.replay_buffer.size()
    status, reply = await post(client, {"session_key": key, "obs": [0, 1e30, 0], "reward": 1.0, "done": True,
                                        "seq": 7})
    assert status == 400 and "the step was not recorded" in reply["error"]  # was 200 {"action": null}
    assert runtime.learner.algorithm.model.replay_buffer.size() == stored
    status, _ = await post(client, {"session_key": key, "obs": [0, 2, 0], "reward": 1.0, "done": True, "seq": 7})
    assert status == 200  # the same seq, now a sane step: the episode ends once
    assert [r.value for r in graph.store.returns(runtime.record.id)] == [2.0, 2.0]


async def test_a_refused_vector_step_records_nothing_and_its_resend_records_each_episode_once(aiohttp_client,
                                                                                             tmp_path):
    client, graph, key = await server(aiohttp_client, tmp_path, n_envs=2)
    runtime = graph.runtime()

    def body(obs, reward, terminated, final, seq):
        return {"session_key": key, "obs": obs, "reward": reward, "terminated": terminated,
                "truncated": [False, False], "final_obs": final, "seq": seq}

    await post(client, body([[0, 0, 0], [0, 0, 0]], [0, 0], [False, False], [None, None], 1))
    await post(client, body([[0, 1, 0], [0, 1, 0]], [1, 1], [False, False], [None, None], 2))
    # env 0 ends (its final observation sane), env 1's observation cannot be taken: refused whole
    status, reply = await post(client, body([[0, 0, 0], [0, 1e30, 0]], [5, 1], [True, False], [[0, 2, 0], None], 3))
    assert status == 400 and "the step was not recorded" in reply["error"]
    assert graph.store.returns(runtime.record.id) == [] and runtime.tracker.steps == 2
    status, _ = await post(client, body([[0, 0, 0], [0, 2, 0]], [5, 1], [True, False], [[0, 2, 0], None], 4))
    assert status == 200
    assert [(r.value, r.length) for r in graph.store.returns(runtime.record.id)] == [(6.0, 2)]
    assert runtime.tracker.steps == 4


def test_a_learner_in_a_ray_actor_answers_which_observations_its_networks_cannot_take():
    """Under ``--ray`` the head asks the agent's actor (a control, as a behaviour file is): its learner's networks
    and filters decide. The actor object alone, no Ray started."""
    import numpy as np
    import pytest

    pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e .[ray])")
    from shepherd.agents.ray.actor import LearnerActor
    from shepherd.definition import AgentDefinition

    actor = LearnerActor()
    actor.build(AgentDefinition("agent", "DQN", [[3], "-inf", "inf"], 2, dict(DQN)), {}, None, None, start=True)
    try:
        rows = [np.zeros(3, np.float32), np.array([0, 1e30, 0], np.float32), np.array([0, 1e5, 0], np.float32)]
        assert actor.process([("unbounded", rows)], 0.0, None).controls == [[1]]
    finally:
        actor.close(10)


def scripted(obs, mask):
    return 0


async def test_a_role_whose_observation_its_agents_networks_cannot_take_is_refused_before_its_turn_counts(
        aiohttp_client, tmp_path):
    """An environment with roles finds a step's suspect numbers where it checks each role's observation, one
    copy's in a vector session's too: the agent's learner is asked, and nothing of the step is taken."""
    from shepherd.environments import EnvironmentSpec

    graph = GraphManager(owner="tests", agents=[AgentSpec("agent", "DQN", [[3], "-inf", "inf"], 2, DQN)],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, heatup_steps=0),
                         environments=(EnvironmentSpec(
                             "duel", {"a": "agent", "s": "tests.http.test_unbounded_steps:scripted"}, "alternate"),))
    app = create_app(ServerConfig(graph, tmp_path / "data"))
    client = await aiohttp_client(app)
    runtime = app[GRAPH].runtime()
    for fields in ({}, {"n_envs": 2}):
        reply = await client.post("/shepherd/login_user/", json={"apikey": app[CREATED_KEYS]["environment duel"],
                                                                 **fields})
        key = (await reply.json())["session_key"]

        def body(role, obs, seq):
            step = {"obs": {role: obs}, "reward": {role: 1.0}}
            return {"session_key": key, "seq": seq, **({"envs": [step, step]} if fields else step)}

        assert (await post(client, body("a", [0, 0, 0], 1)))[0] == 200
        assert (await post(client, body("s", [0, 0, 0], 2)))[0] == 200
        steps = runtime.tracker.steps
        status, reply = await post(client, body("a", [0, 1e30, 0], 3))
        assert status == 400 and "the step was not recorded" in reply["error"], reply
        assert runtime.tracker.steps == steps
        assert (await post(client, body("a", [0, 1, 0], 3)))[0] == 200  # still a's turn: nothing was taken
        assert runtime.tracker.steps == steps + (2 if fields else 1)
