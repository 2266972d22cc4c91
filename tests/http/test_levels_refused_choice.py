"""A selector's choice its learner refuses (400: an observation an off-policy agent's networks cannot take, issue
48's H1) after the level began the episode or ended an option: the episode left without an option was overwritten
unended by the next step of a vector session (an evaluation episode so dropped held its period open for good: the
agent stayed in evaluate, no period closed, client-acting sessions never learned again), and every later step of a
single-env session was a 500 (``assert option is not None``). The orphan is now ended, abandoned, and the next
step begins an episode."""

from __future__ import annotations

from shepherd.graph import AgentSpec, GraphManager, HierarchyAgent, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app

OBS = [[2], "-inf", "inf"]
DQN = {"batch_size": 8, "train_freq": 1, "buffer_size": 1000, "seed": 0, "policy_kwargs": {"net_arch": [8]}}


def graph(every: int = 10 ** 6) -> GraphManager:
    level = {"skills": ["left", "right"], "option_steps": 1, "skills_learn": True}
    return GraphManager(owner="tests", agents=[
        AgentSpec("left", "DQN", OBS, 2, DQN), AgentSpec("right", "DQN", OBS, 2, DQN),
        AgentSpec("pilot", "DQN", OBS, 2, DQN, level=level)],
        schedule=Schedule(steps_between_evaluation_periods=every, evaluation_episodes=1, heatup_steps=0))


async def post(client, body):
    response = await client.post("/shepherd/env/", json=body)
    return response.status, await response.json()


async def login(client, app, **fields) -> str:
    reply = await client.post("/shepherd/login_user/", json={"apikey": app[CREATED_KEYS]["pilot"], **fields})
    return (await reply.json())["session_key"]


async def test_a_single_env_session_goes_on_after_its_first_choice_was_refused(aiohttp_client, tmp_path):
    app = create_app(ServerConfig(graph(), tmp_path / "data"))
    client = await aiohttp_client(app)
    key = await login(client, app)
    status, reply = await post(client, {"session_key": key, "obs": [0, 1e30], "reward": 0, "done": False, "seq": 1})
    assert status == 400 and "the step was not recorded" in reply["error"]
    for seq in (2, 3, 4):
        status, reply = await post(client, {"session_key": key, "obs": [0, 0.5], "reward": 1, "done": seq == 4,
                                            "seq": seq})
        assert status == 200, reply
    pilot = app[GRAPH].preset_agent("pilot", HierarchyAgent).selector
    assert [r.value for r in pilot.store.returns(pilot.record.id)] == [2.0]  # the episode begun at seq 2


async def test_a_refused_choice_in_a_vector_session_hands_its_evaluation_episode_back(aiohttp_client, tmp_path):
    app = create_app(ServerConfig(graph(every=4), tmp_path / "data"))
    client = await aiohttp_client(app)
    key = await login(client, app, n_envs=2)
    pilot = app[GRAPH].preset_agent("pilot", HierarchyAgent).selector
    tracker, seq = pilot.tracker, 0

    async def step(obs, reward, terminated, final):
        nonlocal seq
        seq += 1
        return await post(client, {"session_key": key, "obs": obs, "reward": reward, "terminated": terminated,
                                   "truncated": [False, False], "final_obs": final, "seq": seq})

    await step([[0, 0], [0, 0]], [0, 0], [False, False], [None, None])
    for _ in range(2):
        await step([[0, 1], [0, 1]], [1, 1], [False, False], [None, None])
    assert tracker.to_start == 1 and tracker.running == 0  # a period is open: the next episode is its evaluation
    # env 0 ends (its next episode takes the period's evaluation) and env 1 sends what the networks cannot take
    status, reply = await step([[0, 0], [0, 1e30]], [1, 1], [True, False], [[0, 2], None])
    assert status == 400 and "the step was not recorded" in reply["error"]
    for _ in range(10):  # the client goes on; both envs' episodes end every 3 steps
        for k in range(3):
            status, reply = await step([[0, 0], [0, 1]], [1, 1], [k == 2, k == 2],
                                       [[0, 2], [0, 2]] if k == 2 else [None, None])
            assert status == 200, reply
    # periods close and open again (the orphaned evaluation episode held the first open: period 1 for good)
    assert tracker.period >= 4
    assert len([r for r in pilot.store.returns(pilot.record.id) if r.phase == "evaluate"]) >= 3
