"""A selector served with its skills through the real aiohttp app (docs/levels.md): clients log in with the
selector's key and speak the unchanged protocol; every reply adds ``"option"``; sessions acting at the client
and vector sessions are refused with a clear 400."""

from __future__ import annotations

import asyncio

from shepherd.graph import AgentSpec, GraphManager, HierarchyAgent, Schedule, programmed_selector
from shepherd.graph.kinds import kind_of
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app

OBS = [[2], -1.0, 1.0]
TINY = {"n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0, "policy_kwargs": {"net_arch": [8]}}
LEFT, RIGHT = [0.0, -1.0], [0.0, 1.0]  # the middle of the corridor, cued to the left end, to the right end


def graph_manager(option_steps=3, skills_learn=False, every=10 ** 6):
    level = {"skills": ["left", "right"], "option_steps": option_steps, "skills_learn": skills_learn}
    return GraphManager(owner="tests", agents=[
        AgentSpec("left", "PPO", OBS, 2, TINY), AgentSpec("right", "PPO", OBS, 2, TINY),
        AgentSpec("pilot", "PPO", OBS, 2, TINY, level=level),
        programmed_selector("guide", "shepherd.envs.corridor:toward_cue", OBS, level)],
        schedule=Schedule(steps_between_evaluation_periods=every, evaluation_episodes=1))


async def make_client(aiohttp_client, tmp_path, graph=None):
    app = create_app(ServerConfig(graph or graph_manager(), tmp_path / "data"))
    client = await aiohttp_client(app)
    client.keys = app[CREATED_KEYS]
    return client


async def post(client, path, body, status=200):
    response = await client.post(path, json=body)
    assert response.status == status, await response.text()
    return await response.json()


async def login(client, agent, status=200, **extra):
    return await post(client, "/shepherd/login_user/", {"apikey": client.keys[agent], **extra}, status)


async def run(client, key, obs, steps, done_at_end=True):
    """``steps`` actions from ``obs`` (reward 1 each): the replies, the last ending the episode if asked."""
    replies = [await post(client, "/shepherd/env/", {"session_key": key, "obs": obs, "reward": 0.0, "done": False})]
    for t in range(steps):
        done = done_at_end and t == steps - 1
        replies.append(await post(client, "/shepherd/env/", {"session_key": key, "obs": obs, "reward": 1.0,
                                                             "done": done}))
    return replies


async def test_a_selectors_session_speaks_the_protocol_and_every_reply_names_its_option(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path)
    opened = await login(client, "pilot")
    assert opened["agent"] == "pilot" and opened["action_space"] == 2  # the skills' actions
    replies = await run(client, opened["session_key"], RIGHT, 7)
    for reply in replies[:-1]:
        assert reply["action"] in (0, 1) and reply["option"] in ("left", "right") and "policy_version" in reply
    assert replies[-1] == {"action": None, "option": None}
    graph = client.server.app[GRAPH]
    pilot = graph.preset_agent("pilot", HierarchyAgent)
    options = pilot.selector.options
    assert sum(use.chosen for use in options.values()) == 3  # options of 3, 3 and 1 steps
    assert sum(use.steps for use in options.values()) == 7
    assert pilot.selector.tracker.steps == 7 and pilot.selector.episodes == 1
    assert list(pilot.selector.store.returns(pilot.record.id))[-1].value == 7.0  # an ordinary episode return


async def test_a_programmed_selector_chooses_by_its_function(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path)
    key = (await login(client, "guide"))["session_key"]
    assert {reply["option"] for reply in (await run(client, key, LEFT, 4))[:-1]} == {"left"}
    assert {reply["option"] for reply in (await run(client, key, RIGHT, 4))[:-1]} == {"right"}


async def test_a_flat_agents_replies_have_no_option(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path)
    replies = await run(client, (await login(client, "left"))["session_key"], LEFT, 2)
    assert all("option" not in reply for reply in replies)


async def test_client_acting_sessions_of_a_selector_are_refused_with_400(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path)
    acting = await login(client, "pilot", status=400, acting="client")
    assert "acting" in acting["error"] and "pilot" in acting["error"]
    assert len(client.server.app[GRAPH].sessions) == 0


async def test_a_vector_session_of_a_selector_lists_each_envs_option(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path)
    opened = await login(client, "guide", n_envs=2)
    assert opened["n_envs"] == 2 and opened["action_space"] == 2
    body = {"session_key": opened["session_key"], "obs": [LEFT, RIGHT], "reward": [0.0, 0.0],
            "terminated": [False, False], "truncated": [False, False]}
    for _ in range(4):
        reply = await post(client, "/shepherd/env/", body)
        assert reply["options"] == ["left", "right"] and len(reply["actions"]) == 2
        body["reward"] = [1.0, 1.0]
    ended = {**body, "obs": [RIGHT, RIGHT], "terminated": [True, False], "final_obs": [LEFT, None]}
    assert (await post(client, "/shepherd/env/", ended))["options"] == ["right", "right"]  # env 0 reset, chose anew
    guide = client.server.app[GRAPH].preset_agent("guide", HierarchyAgent).selector
    assert guide.episodes == 1 and guide.options["left"].chosen == 2  # options of 3 steps, then the episode's end


async def test_the_admin_api_and_metrics_show_the_level_and_its_options_use(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path)
    await run(client, (await login(client, "guide"))["session_key"], LEFT, 4)
    agent_id = client.server.app[GRAPH].preset_agent_id("guide")
    response = await client.get(f"/shepherd/admin/api/agents/{agent_id}",
                                headers={"Authorization": f"Bearer {client.keys['guide']}"})
    assert response.status == 200, await response.text()
    level = (await response.json())["level"]
    assert (level["skills"], level["option_steps"], level["skills_learn"]) == (["left", "right"], 3, False)
    assert level["options"]["left"] == {"chosen": 2, "steps": 4, "reward": 4.0, "mean_steps": 2.0}
    assert level["options"]["right"]["chosen"] == 0
    flat = await client.get(f"/shepherd/admin/api/agents/{client.server.app[GRAPH].preset_agent_id('left')}",
                            headers={"Authorization": f"Bearer {client.keys['left']}"})
    assert (await flat.json())["level"] is None
    exposition = await (await client.get("/metrics")).text()
    assert 'shepherd_option_chosen_total{agent="tests/guide",client="",skill="left"} 2.0' in exposition
    assert 'shepherd_option_steps_total{agent="tests/guide",client="",skill="left"} 4.0' in exposition


async def test_a_checkpoint_holds_every_level_and_the_options_use(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path, graph_manager(skills_learn=True))
    graph = client.server.app[GRAPH]
    key = (await login(client, "pilot"))["session_key"]
    for _ in range(2):
        await run(client, key, RIGHT, 5)
    pilot = graph.preset_agent("pilot", HierarchyAgent)
    used = pilot.selector.options_used()
    skills = [graph.served.agents[graph.preset_agent_id(name)].runtime for name in ("left", "right")]
    assert not any(skill.model_path.exists() for skill in skills)
    await asyncio.wrap_future(pilot.selector.checkpoint())
    for skill in skills:  # written with the selector's: the skills learned from the hierarchy's steps
        if skill.checkpoints.pending is not None:
            await asyncio.wrap_future(skill.checkpoints.pending)
    assert all(skill.model_path.exists() for skill in skills)
    stored = kind_of(pilot.record).stored_status(graph.store, pilot.record, "stopped", None, None)
    assert stored.level["options"] == used and stored.level["skills"] == ["left", "right"]  # read from the folder
    resumed = await asyncio.to_thread(graph.build_agent, pilot.record, True)
    try:
        assert isinstance(resumed, HierarchyAgent)
        assert resumed.selector.options_used() == used and resumed.selector.tracker.steps == 10
    finally:
        await asyncio.to_thread(resumed.discard)


async def test_restarting_a_skill_ends_its_selectors_sessions_and_a_new_login_uses_the_new_learner(
        aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path)
    graph = client.server.app[GRAPH]
    key = (await login(client, "guide"))["session_key"]
    flat = (await login(client, "right"))["session_key"]  # another agent's session is not the skill's business
    await run(client, key, LEFT, 2, done_at_end=False)
    ended, _ = await graph.served.restart(graph.preset_agent_id("left"))
    assert ended == 1
    step = {"session_key": key, "obs": LEFT, "reward": 0.0, "done": False}
    assert "log in again" in (await post(client, "/shepherd/env/", step, status=401))["error"]
    await post(client, "/shepherd/env/", {**step, "session_key": flat})
    replies = await run(client, (await login(client, "guide"))["session_key"], LEFT, 2)
    assert replies[0]["option"] == "left"


async def test_an_off_policy_selector_learns_from_its_options(aiohttp_client, tmp_path):
    dqn = {"buffer_size": 100, "batch_size": 4, "train_freq": 2, "learning_starts": 0, "seed": 0,
           "policy_kwargs": {"net_arch": [8]}}
    level = {"skills": ["left", "right"], "option_steps": 2}
    graph = GraphManager(owner="tests", agents=[
        AgentSpec("left", "PPO", OBS, 2, TINY), AgentSpec("right", "PPO", OBS, 2, TINY),
        AgentSpec("pilot", "DQN", OBS, 2, dqn, level=level)], schedule=Schedule(steps_between_evaluation_periods=10 ** 6))
    client = await make_client(aiohttp_client, tmp_path, graph)
    key = (await login(client, "pilot"))["session_key"]
    for _ in range(3):
        assert (await run(client, key, RIGHT, 6))[-1] == {"action": None, "option": None}
    pilot = client.server.app[GRAPH].preset_agent("pilot", HierarchyAgent).selector
    await asyncio.wrap_future(pilot.learner.mark())  # the last option's end, queued after the last reply
    assert pilot.learner.failure is None and pilot.learner.steps == 9  # 3 options of 2 steps per episode


async def test_a_selectors_first_vector_step_is_answered_while_a_single_env_session_of_it_is_open(
        aiohttp_client, tmp_path):
    """Issue 48, M8: with skills that learn and a single-env session of the selector open (mid-episode), the first
    step of a vector session of the same selector was answered 500 (an env without an action)."""
    client = await make_client(aiohttp_client, tmp_path, graph_manager(skills_learn=True))
    single = await login(client, "pilot")
    await run(client, single["session_key"], RIGHT, 2, done_at_end=False)
    opened = await login(client, "pilot", n_envs=2)
    body = {"session_key": opened["session_key"], "obs": [LEFT, RIGHT], "reward": [0.0, 0.0],
            "terminated": [False, False], "truncated": [False, False]}
    for _ in range(3):
        reply = await post(client, "/shepherd/env/", body)
        assert all(action in (0, 1) for action in reply["actions"]) and len(reply["options"]) == 2
        body["reward"] = [1.0, 1.0]


def masked_graph():
    level = {"skills": ["left", "right"], "option_steps": 2, "skills_learn": True}
    return GraphManager(owner="tests", agents=[
        AgentSpec("left", "MaskablePPO", OBS, 2, TINY), AgentSpec("right", "MaskablePPO", OBS, 2, TINY),
        AgentSpec("pilot", "PPO", OBS, 2, TINY, level=level), AgentSpec("flat", "PPO", OBS, 2, TINY)],
        schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1))


async def test_a_selector_over_skills_that_take_masks_takes_masks_in_its_steps(aiohttp_client, tmp_path):
    """Issue 45: action masks in a selector's steps (they were refused): checked against the skills' action space
    and applied by the skill that acts, single-env and vector, also on the step that starts an option."""
    client = await make_client(aiohttp_client, tmp_path, masked_graph())
    opened = await login(client, "pilot")
    assert opened["action_masks"] is True
    key = opened["session_key"]
    for t in range(7):  # options of 2 steps: steps that start an option (selector, then skill) and that go on
        mask = [t % 2 == 0, t % 2 == 1]  # one action allowed, alternately
        reply = await post(client, "/shepherd/env/", {"session_key": key, "obs": RIGHT, "reward": 0.0 if t == 0 else 1.0,
                                                      "done": False, "action_mask": mask})
        assert reply["action"] == mask.index(True), (t, reply)
    bad = await post(client, "/shepherd/env/", {"session_key": key, "obs": RIGHT, "reward": 1.0, "done": False,
                                                "action_mask": [True, True, True]}, status=400)
    assert "action_mask" in bad["error"]
    vector = await login(client, "pilot", n_envs=2)
    body = {"session_key": vector["session_key"], "obs": [LEFT, RIGHT], "reward": [0.0, 0.0],
            "terminated": [False, False], "truncated": [False, False], "action_mask": [[True, False], [False, True]]}
    for _ in range(5):
        assert (await post(client, "/shepherd/env/", body))["actions"] == [0, 1]
        body["reward"] = [1.0, 1.0]


async def test_a_selector_whose_skills_take_no_masks_refuses_them_as_a_flat_agent_does(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path)
    opened = await login(client, "pilot")
    assert "action_masks" not in opened
    refused = await post(client, "/shepherd/env/", {"session_key": opened["session_key"], "obs": RIGHT, "reward": 0.0,
                                                    "done": False, "action_mask": [True, False]}, status=400)
    assert "takes no 'action_mask'" in refused["error"]
