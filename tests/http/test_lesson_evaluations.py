"""An evaluation counts toward a lesson's ``until`` only if its episodes ran in that lesson's configs. A vector
session draws an env's next config when its episode begins, so after an advance each env's next episode still
runs in the old lesson's config (docs/lessons.md), and that episode can be an evaluation's; a lesson moved by hand
while a period is open leaves the period's episodes in the old lesson. Before, such a period was judged as the
new lesson's: a lesson could be passed, and the preset's target met in the last one, on episodes that never ran
in it."""

from __future__ import annotations

import json

from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.graph.schedule import PhaseTracker
from shepherd.http.state import CREATED_ADMIN_TOKEN
from tests.http.test_lessons_wire import GRAPH, OBS, episode, login, make_client, post

UNTIL_ONE = {"evaluation_return": 5, "evaluations": 1}


def agent(lessons, n_envs: int, every: int, episodes: int) -> GraphManager:
    parameters = {"n_envs": n_envs, "n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0}
    return GraphManager(owner="tests", agents=[AgentSpec("pole", "PPO", [[4], "-inf", "inf"], 2, parameters,
                                                         lessons=lessons)],
                        schedule=Schedule(steps_between_evaluation_periods=every, evaluation_episodes=episodes))


async def test_a_vector_evaluation_run_in_the_old_lessons_configs_does_not_pass_the_new_one(aiohttp_client, tmp_path):
    lessons = [{"name": name, "config": {"level": name}, **({"until": UNTIL_ONE} if name != "C" else {})}
               for name in "ABC"]
    client = await make_client(aiohttp_client, tmp_path, agent(lessons, n_envs=2, every=5, episodes=1))
    key = (await login(client, n_envs=2))["session_key"]
    runtime = client.server.app[GRAPH].runtime()

    async def step(ended=(), reward=0.0):
        return await post(client, "/shepherd/env/", {
            "session_key": key, "obs": [OBS, OBS], "reward": [reward, reward],
            "terminated": [i in ended for i in range(2)], "truncated": [False, False],
            "final_obs": [OBS if i in ended else None for i in range(2)]})

    for _ in range(3):
        await step()  # both envs begin a training episode (lesson A's configs), then 4 training steps
    await step(ended=(0,))  # 5 steps: a period opens; env 0 begins the evaluation episode, in lesson A
    await step(reward=10.0)
    await step(ended=(0,), reward=10.0)  # return 20 >= 5: A passed
    assert runtime.lessons.name == "B"
    await step()  # 10 training steps: the next period opens
    await step(ended=(1,))  # env 1 begins its evaluation episode: in A's config, drawn when its last one began
    await step(reward=10.0)
    await step(ended=(1,), reward=10.0)
    evaluation = runtime.evaluations[-1]
    recorded = [r for r in runtime.store.returns(runtime.record.id) if r.phase == "evaluate"][-1]
    assert recorded.lesson == "A" and evaluation.episode_lessons == ("A",)
    assert runtime.lessons.name == "B", "an evaluation run in lesson A's configs passed lesson B"
    assert evaluation.lesson == "A" and not evaluation.final_lesson  # recorded as A's, never the preset's target


async def test_a_period_open_when_a_lesson_is_moved_by_hand_does_not_pass_the_new_lesson(aiohttp_client, tmp_path):
    lessons = [{"name": "A", "config": {"level": "A"}, "until": {"evaluation_return": 10 ** 6}},
               {"name": "B", "config": {"level": "B"}, "until": {"evaluation_return": 2, "evaluations": 1}},
               {"name": "C", "config": {"level": "C"}}]
    client = await make_client(aiohttp_client, tmp_path, agent(lessons, n_envs=1, every=3, episodes=2))
    runtime = client.server.app[GRAPH].runtime()
    key = (await login(client))["session_key"]
    await episode(client, key, steps=3)  # 3 training steps: a period of 2 evaluation episodes opens
    await episode(client, key, steps=3)  # its first episode, in lesson A (return 3)
    response = await client.post(f"/shepherd/admin/api/agents/{runtime.record.id}/lesson", json={"lesson": "B"},
                                 headers={"Authorization": f"Bearer {client.server.app[CREATED_ADMIN_TOKEN]}"})
    assert response.status == 200, await response.text()
    await episode(client, key, steps=3)  # the second: its config was announced before the move, so lesson A's
    assert [r.lesson for r in runtime.store.returns(runtime.record.id) if r.phase == "evaluate"] == ["A", "A"]
    assert runtime.lessons.name == "B", "lesson B was passed by a period whose episodes all ran in lesson A"
    await episode(client, key, steps=3)  # training: 3 steps, the next period
    await episode(client, key, steps=3)
    await episode(client, key, steps=3)  # both in lesson B: return 3 >= 2, B passed
    assert runtime.lessons.name == "C"


def test_a_checkpoint_keeps_the_lessons_of_an_open_periods_episodes():
    tracker = PhaseTracker(Schedule(steps_between_evaluation_periods=10, evaluation_episodes=2))
    tracker.period_returns, tracker.period_lessons = [1.0, 2.0], ["A", "B"]
    restored = PhaseTracker(tracker.schedule)
    restored.load(tracker.state())
    assert restored.period_lessons == ["A", "B"]
    restored.load({**tracker.state(), "period_lessons": None})  # a checkpoint of before: unknown, counted as now
    assert restored.period_lessons == [None, None]



async def test_a_lesson_moved_on_a_failed_learner_does_not_say_it_was_checkpointed(aiohttp_client, tmp_path):
    lessons = [{"name": "A", "config": {"level": "A"}, "until": UNTIL_ONE}, {"name": "B", "config": {"level": "B"}}]
    client = await make_client(aiohttp_client, tmp_path, agent(lessons, n_envs=1, every=3, episodes=1))
    runtime = client.server.app[GRAPH].runtime()
    runtime.learner.failure = "RuntimeError: the test broke it"
    response = await client.post(f"/shepherd/admin/api/agents/{runtime.record.id}/lesson", json={"lesson": "B"},
                                 headers={"Authorization": f"Bearer {client.server.app[CREATED_ADMIN_TOKEN]}"})
    assert response.status == 200 and runtime.lessons.name == "B"
    message = json.dumps(await response.json())
    assert "not checkpointed" in message and "(checkpointed" not in message
