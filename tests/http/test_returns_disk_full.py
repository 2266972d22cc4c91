"""An episode's return the curve cannot take (a full disk: the append to returns.jsonl fails) is logged and
counted (/metrics: ``shepherd_unrecorded_returns_total``); the step is answered and the schedule goes on. Before, the
step was a 500 and an evaluation episode ending so stayed running for good: every later episode was an
evaluation's, a budget never ended, and trials stopped."""

from __future__ import annotations

import errno

from prometheus_client.parser import text_string_to_metric_families

from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app
from shepherd.level import Phase

OBS = [0.01, -0.02, 0.03, 0.04]


async def test_a_return_not_appended_closes_its_evaluation_and_is_counted(aiohttp_client, tmp_path):
    parameters = {"n_envs": 1, "n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0}
    graph = GraphManager(owner="tests", agents=[AgentSpec("pole", "PPO", [[4], "-inf", "inf"], 2, parameters)],
                         schedule=Schedule(steps_between_evaluation_periods=3, evaluation_episodes=1))
    app = create_app(ServerConfig(graph, tmp_path / "data"))
    client = await aiohttp_client(app)
    login = await client.post("/shepherd/login_user/", json={"apikey": app[CREATED_KEYS]["pole"]})
    key = (await login.json())["session_key"]
    runtime = app[GRAPH].runtime()

    async def step(reward: float, done: bool) -> int:
        response = await client.post("/shepherd/env/", json={"session_key": key, "obs": OBS, "reward": reward,
                                                             "done": done})
        return response.status

    for t in range(5):  # a training episode of 4 steps: the third opens an evaluation period
        assert await step(0.0 if t == 0 else 1.0, t == 4) == 200
    assert await step(0.0, False) == 200  # the evaluation episode starts
    assert runtime.tracker.running == 1
    store = runtime.records.store
    real = store.append_return

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    store.append_return = full
    assert await step(1.0, True) == 200  # it ends with the disk full
    store.append_return = real
    assert runtime.tracker.running == 0 and runtime.tracker.phase is Phase.TRAIN
    assert [result.returns for result in runtime.records.evaluations] == [(1.0,)]
    metrics = {family.name: family for family in text_string_to_metric_families(
        await (await client.get("/metrics")).text())}
    assert [s.value for s in metrics["shepherd_unrecorded_returns"].samples if s.name.endswith("_total")] == [1]
