"""A vector session of N envs on an on-policy agent with ``n_envs`` >= N learns from every train-mode step
(docs/protocol.md, "Vector sessions"), also when evaluation episodes, drawn by the schedule for whichever
env starts an episode next, take envs out of training for a while: the rollout segments they leave are
split between the envs still training (``OnPolicyAdapter._split``). The only steps not learned are the
ones no rollout has room for: at the step that fills a rollout, the envs beyond its last free rows.

Driven in-process through ``GraphManager.step`` as the HTTP edge drives it; CartPole-like observations,
each env's episodes of its own length, so envs end (and start evaluations) at different steps.
"""

import asyncio

import pytest

from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.graph.local import serving_here
from shepherd.level.episodes import Phase
from shepherd.storage import Store
from shepherd.wire import VectorStepInput

N_STEPS = 8


def obs(i: int, t: int) -> list[float]:
    return [0.01 * i, -0.02 + 0.001 * (t % 50), 0.03, 0.04 * i]


def rollout_overflow(acting: list[int], rows: int) -> int:
    """The train-mode acts no rollout can hold: each step's acts take free rows of the rollout (a new one
    once it is full); at the step that fills it, the acts beyond its last free rows have none."""
    free, lost = rows, 0
    for acts in acting:
        free = free or rows  # full: the acts wait for the update and go into the next rollout
        lost += max(0, acts - free)
        free = max(0, free - acts)
    return lost


async def run(tmp_path, n_envs: int, segments: int, every: int | None, steps: int) -> dict[str, int]:
    parameters = {"n_envs": segments, "n_steps": N_STEPS, "batch_size": 16, "n_epochs": 1, "seed": 0}
    graph = GraphManager(owner="tests", agents=[AgentSpec("pole", "PPO", [[4], "-inf", "inf"], 2, parameters)],
                         schedule=Schedule(steps_between_evaluation_periods=every or 10 ** 9, evaluation_episodes=1,
                                           checkpoint_every_steps=10 ** 9, checkpoint_every_seconds=10 ** 9))
    store = Store(tmp_path / "data")
    key = graph.create_graph(store, serving_here())["pole"]
    session = graph.login(key, n_envs=n_envs)
    lengths = [5 + 3 * i for i in range(n_envs)]  # env i ends an episode every 5 + 3i steps
    since, acting = [0] * n_envs, []
    try:
        for t in range(steps):
            ended = [t > 0 and since[i] == lengths[i] for i in range(n_envs)]
            step = VectorStepInput.of([obs(i, t) for i in range(n_envs)], [0.0 if t == 0 else 1.0] * n_envs,
                                      ended, [False] * n_envs,
                                      final_obs=[obs(i, 99) if end else None for i, end in enumerate(ended)])
            await graph.step(graph.session(session.key), step)
            since = [1 if ended[i] or t == 0 else since[i] + 1 for i in range(n_envs)]
            acting.append(sum(episode is not None and episode.phase is Phase.TRAIN
                              for episode in session.level.episodes))
        runtime = graph.runtime()
        await asyncio.wrap_future(runtime.learner.mark())  # every step handed to the learner is processed
        adapter = runtime.learner.algorithm
        pending = sum(actor.pending for actor in adapter._actors.values())  # the last acts: no reward yet
        return {"acts": sum(acting), "learned": adapter.model.num_timesteps + pending,
                "unlearned": adapter.unlearned_steps, "overflow": rollout_overflow(acting, segments * N_STEPS),
                "evaluated": sum(acting) != n_envs * steps, "updates": adapter.version}
    finally:
        graph.logout(session.key)
        await asyncio.to_thread(graph.close)
        store.close()


@pytest.mark.parametrize("n_envs, segments", [(4, 4), (4, 8), (3, 4)])
async def test_a_vector_session_learns_every_train_step_between_evaluations(tmp_path, n_envs, segments):
    got = await run(tmp_path, n_envs, segments, every=40, steps=160)
    assert got["evaluated"] and got["updates"] >= 5  # envs did leave for evaluations, and it trained
    assert got["learned"] + got["unlearned"] == got["acts"]  # every train-mode act is counted once
    assert got["unlearned"] == got["overflow"], got  # the only steps not learned: those no rollout had room for
    assert got["overflow"] <= (n_envs - 1) * got["updates"]


async def test_without_evaluations_as_many_segments_as_envs_lose_nothing(tmp_path):
    got = await run(tmp_path, 4, 4, every=None, steps=60)
    assert not got["evaluated"] and got["unlearned"] == got["overflow"] == 0
    assert got["learned"] == got["acts"] == 4 * 60
