"""Large observations are not handled on the event loop (issue 39, M2): a vector step's large body is parsed on
a worker thread, and an evaluate-mode vector step's large greedy batch is answered on one, so another agent's
step is answered meanwhile. Each test holds the large step's work on its worker until the other agent's step
has been answered: on the event loop that could never happen (the hold ends unreleased after 5 s)."""

import asyncio
import threading

from shepherd import wire
from shepherd.agents.greedy_policy import GreedyPolicy
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app

N_ENVS, SIZE = 40, 1024  # 40,960 numbers, a body of about 200 KB: over both thresholds
PPO = {"n_envs": 2, "n_steps": 16, "batch_size": 32, "n_epochs": 1, "seed": 0}


def graph_manager():
    return GraphManager(owner="tests", agents=[AgentSpec("big", "PPO", [[SIZE], "-inf", "inf"], 2, dict(PPO)),
                                               AgentSpec("small", "PPO", [[4], "-inf", "inf"], 2, dict(PPO))],
                        schedule=Schedule(heatup_steps=0, steps_between_evaluation_periods=None,
                                          evaluation_episodes=0))


class Hold:
    """Holds a function's large calls until `release` (at most 5 s); `released` says whether each was
    released rather than given up on."""

    def __init__(self, large) -> None:
        self.large = large
        self.entered, self.release_event = threading.Event(), threading.Event()
        self.released: list[bool] = []

    def wrap(self, function):
        def held(*args, **kwargs):
            if self.large(*args):
                self.entered.set()
                self.released.append(self.release_event.wait(5))
            return function(*args, **kwargs)
        return held


async def big_step(client, key, seq):
    body = {"session_key": key, "obs": [[0.001 * (i + seq)] * SIZE for i in range(N_ENVS)],
            "reward": [0.0] * N_ENVS, "terminated": [False] * N_ENVS, "truncated": [False] * N_ENVS, "seq": seq}
    reply = await client.post("/shepherd/env/", json=body)
    assert reply.status == 200, await reply.text()
    return await reply.json()


async def small_step_while_held(client, app, hold, big):
    """Start the large step ``big``; once its work is held, a step of the small agent; then release."""
    small_key = app[CREATED_KEYS]["small"]
    login = await (await client.post("/shepherd/login_user/", json={"apikey": small_key})).json()
    task = asyncio.ensure_future(big)
    for _ in range(500):
        if hold.entered.is_set() or task.done():
            break
        await asyncio.sleep(0.01)
    assert hold.entered.is_set(), "the large step's work was never reached"
    reply = await client.post("/shepherd/env/", json={"session_key": login["session_key"], "obs": [0.1, 0.2, 0.3, 0.4],
                                                      "reward": 0.0, "done": False})
    assert reply.status == 200, await reply.text()
    hold.release_event.set()
    await task
    assert hold.released == [True], "the small agent's step was not answered while the large step's work ran"


async def evaluate_login(client, app):
    reply = await client.post("/shepherd/login_user/", json={"apikey": app[CREATED_KEYS]["big"], "mode": "evaluate",
                                                             "n_envs": N_ENVS})
    assert reply.status == 200, await reply.text()
    return (await reply.json())["session_key"]


async def test_a_large_vector_step_is_parsed_off_the_event_loop(aiohttp_client, tmp_path, monkeypatch):
    app = create_app(ServerConfig(graph_manager(), tmp_path / "data"))
    client = await aiohttp_client(app)
    key = await evaluate_login(client, app)
    hold = Hold(lambda data, *rest: len(data.get("obs") or ()) == N_ENVS)
    monkeypatch.setattr(wire, "parse_vector_step", hold.wrap(wire.parse_vector_step))
    await small_step_while_held(client, app, hold, big_step(client, key, 1))


async def test_an_evaluate_mode_vector_step_s_large_greedy_batch_is_answered_off_the_event_loop(
        aiohttp_client, tmp_path, monkeypatch):
    app = create_app(ServerConfig(graph_manager(), tmp_path / "data"))
    client = await aiohttp_client(app)
    key = await evaluate_login(client, app)
    learner = next(r for r in app[GRAPH].runtimes.values() if r.record.name == "big").learner
    seq = 0
    while not learner.greedy.ready():  # the first steps ask the learner to publish its weights
        seq += 1
        await big_step(client, key, seq)
        await asyncio.sleep(0.05)
        assert seq < 100, "the learner never published its weights"
    hold = Hold(lambda policy, observations, *rest: len(observations) == N_ENVS)
    monkeypatch.setattr(GreedyPolicy, "act_batch", hold.wrap(GreedyPolicy.act_batch))
    await small_step_while_held(client, app, hold, big_step(client, key, seq + 1))
