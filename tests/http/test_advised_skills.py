"""A selector over an advised skill through the real aiohttp app (docs/levels.md, "Advised skills"): a login
names its client, and the advised skill acts (and, with ``skills_learn``, learns) with that client's learner,
built off the event loop by the login; a pooled skill serves every client with its one learner."""

from __future__ import annotations

import threading

from shepherd.graph import AdvisedAgent, AgentSpec, GraphManager, HierarchyAgent, PooledAgent, Schedule
from shepherd.http import GRAPH
from tests.http.test_levels import OBS, RIGHT, TINY, make_client, post, run


async def login(http, agent, status=200, **extra):
    return await post(http, "/shepherd/login_user/", {"apikey": http.keys[agent], **extra}, status)


def graph_manager():
    level = {"skills": ["left", "right"], "option_steps": 3, "skills_learn": True}
    return GraphManager(owner="tests", agents=[
        AgentSpec("left", "PPO", OBS, 2, TINY),  # pooled
        AgentSpec("right", "PPO", OBS, 2, TINY, sharing="advised"),  # a learner per client
        AgentSpec("pilot", "PPO", OBS, 2, TINY, level=level)],
        schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1))


async def test_a_selectors_advised_skill_acts_and_learns_with_the_logins_client(aiohttp_client, tmp_path,
                                                                               monkeypatch):
    client = await make_client(aiohttp_client, tmp_path, graph_manager())
    graph = client.server.app[GRAPH]
    right = graph.preset_agent("right", AdvisedAgent)
    built_on = []
    build_client = right.build_client
    monkeypatch.setattr(right, "build_client", lambda name: built_on.append(threading.current_thread()) or
                        build_client(name))
    pilot = graph.preset_agent("pilot", HierarchyAgent)
    for name in ("arm-1", "arm-2"):
        key = (await login(client, "pilot", client=name))["session_key"]
        for _ in range(4):  # options of 3 steps: each skill chosen some of the time, 8-step rollouts
            replies = await run(client, key, RIGHT, 9)
            assert all(reply["option"] in ("left", "right") for reply in replies[:-1])
    assert sorted(right.clients) == ["arm-1", "arm-2"]  # the advised skill has a learner per client ...
    assert len(built_on) == 2 and threading.main_thread() not in built_on  # ... built off the event loop
    assert not right.failures
    used = [runtime for runtime in right.clients.values() if runtime.learner.steps]
    assert used, "no client's learner of the advised skill learned from the selector's steps"
    learning = pilot.selector.learning_skills  # ... checkpointed with the selector, as a learning skill is
    assert all(runtime in learning for runtime in used)
    assert graph.preset_agent("left", PooledAgent).runtime in learning  # the pooled skill's one


async def test_a_selector_with_an_advised_skill_needs_a_client_to_train_and_not_to_evaluate(aiohttp_client,
                                                                                              tmp_path):
    client = await make_client(aiohttp_client, tmp_path, graph_manager())
    refused = await login(client, "pilot", status=400)
    assert "whose skill right is advised" in refused["error"] and "client" in refused["error"]
    await run(client, (await login(client, "pilot", client="arm-1"))["session_key"], RIGHT, 3)
    evaluation = await login(client, "pilot", mode="evaluate")  # the advised skill's best (here: only) client
    replies = await run(client, evaluation["session_key"], RIGHT, 3)
    assert all(reply["option"] in ("left", "right") for reply in replies[:-1])


async def test_a_client_is_refused_by_a_selector_whose_skills_are_all_pooled(aiohttp_client, tmp_path):
    from tests.http.test_levels import graph_manager as pooled_skills

    client = await make_client(aiohttp_client, tmp_path, pooled_skills())
    refused = await login(client, "pilot", client="arm-1", status=400)
    assert "none of its skills is advised" in refused["error"]
