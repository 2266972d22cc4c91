"""A vector session of N envs on an on-policy agent with ``n_envs`` >= N learns from every train-mode step
(docs/protocol.md, "Vector sessions"), also when evaluation episodes, drawn by the schedule for whichever
env starts an episode next, take envs out of training for a while: the rollout segments they leave are
split between the envs still training (``OnPolicyAdapter._split``). The only steps not learned are the
ones no rollout has room for: at the step that fills a rollout, the envs beyond its last free rows.

Driven in-process through ``GraphManager.step`` as the HTTP edge drives it; CartPole-like observations,
each env's episodes of its own length, so envs end (and start evaluations) at different steps.
"""

import asyncio

import numpy as np
import pytest
import torch as th

from shepherd.agents import ActMode, Kind, Request, build_learner
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.graph.local import serving_here
from shepherd.level.episodes import Phase
from shepherd.storage import Store
from shepherd.wire import VectorStepInput
from shepherd.wire.spaces import parse_space
from shepherd.wire.experience import Experience

N_STEPS = 8
EXPLORE, GREEDY = ActMode.EXPLORE, ActMode.GREEDY


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
                              for episode in session.level.lifecycle.episodes))
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


async def test_without_evaluations_envs_that_do_not_divide_the_rollout_lose_its_remainder_only(tmp_path):
    got = await run(tmp_path, 3, 4, every=None, steps=66)  # 32 rows a rollout, 3 acts a step: 11 steps, 1 lost
    assert not got["evaluated"] and got["updates"] == 5  # the sixth rollout completes with the next step
    assert got["unlearned"] == got["overflow"] == 6 and got["learned"] == 198 - 6


def split_by_a_vector_session(rollouts: list[dict]):
    """A PPO learner (2 segments of 4 rows) where env 1 of a vector session evaluated while env 2 filled
    column 1 and went on in column 0 (row 1); env 1, back to training with no segment free, took the later
    half of env 2's rows: env 2 writes row 2, env 1 row 3 (pending). Its trainings append the rollout's
    rewards, episode starts, values and advantages to ``rollouts`` instead of training."""
    learner = build_learner("PPO", "t", parse_space([[4], "-inf", "inf"]), parse_space(2),
                            {"seed": 0, "n_envs": 2, "n_steps": 4, "batch_size": 8, "n_epochs": 1}, None)
    adapter = learner.algorithm
    adapter.model.train = lambda: rollouts.append({name: getattr(adapter.buffer, name).copy() for name in
                                                   ("rewards", "episode_starts", "values", "advantages")})
    learner.start()
    step(learner, ("BEGIN", 1, EXPLORE), ("BEGIN", 2, EXPLORE))  # env 1: column 0, env 2: column 1
    step(learner, ("END", 1, EXPLORE), ("BEGIN", 1, GREEDY), ("STEP", 2, EXPLORE))  # env 1 evaluates
    for _ in range(3):  # env 2 fills column 1, then goes on in column 0 (row 1)
        step(learner, ("STEP", 1, GREEDY), ("STEP", 2, EXPLORE))
    step(learner, ("END", 1, GREEDY), ("BEGIN", 1, EXPLORE), ("STEP", 2, EXPLORE))  # env 1 back: splits
    return learner


SEEN = {1: np.full(4, 0.1, dtype=np.float32), 2: np.full(4, 0.2, dtype=np.float32)}


def step(learner, *parts: tuple[str, int, ActMode]) -> None:
    """One vector step of the session of envs 1 and 2 (each env always sees the same observation)."""
    learner.submit([Request(getattr(Kind, kind), actor, SEEN[actor], 0.0 if kind == "BEGIN" else 1.0, False,
                            mode, group=1) for kind, actor, mode in parts]).result(10)


def test_a_split_segment_is_cut_with_a_bootstrap_and_its_tail_starts_fresh():
    """Env 2's last row before the cut is bootstrapped with the value of its next observation (as a time
    limit), env 1's first row after it starts an episode, so GAE never crosses the cut; nothing is unlearned."""
    rollouts: list[dict] = []
    learner = split_by_a_vector_session(rollouts)
    adapter = learner.algorithm
    try:
        step(learner, ("STEP", 1, EXPLORE), ("STEP", 2, EXPLORE))  # rows 2 (env 2) and 3 (env 1) done: trained
        with th.no_grad():
            value = float(adapter.model.policy.predict_values(th.as_tensor(SEEN[2][None]))[0, 0])
    finally:
        learner.close()
    assert len(rollouts) == 1 and adapter.unlearned_steps == 0
    rollout, gamma = rollouts[0], adapter.model.gamma
    assert list(rollout["episode_starts"][:, 0]) == [1.0, 1.0, 0.0, 1.0]  # env 1, env 2 (fresh), then env 1
    assert list(rollout["episode_starts"][:, 1]) == [1.0, 0.0, 0.0, 0.0]
    assert rollout["rewards"][0, 0] == 1.0 and rollout["rewards"][1, 0] == 1.0  # env 1's end: terminal
    assert rollout["rewards"][2, 0] == pytest.approx(1.0 + gamma * value, rel=1e-5)  # env 2 cut: bootstrapped
    assert rollout["rewards"][3, 0] == 1.0  # a column's last row: bootstrapped by GAE's last value instead
    assert rollout["advantages"][2, 0] == pytest.approx(rollout["rewards"][2, 0] - rollout["values"][2, 0], rel=1e-5)


def test_a_client_acting_session_uploads_into_the_split_segments_a_vector_session_left():
    """The vector session leaves mid-rollout: its two half-columns' rows (2 and 3 of column 0) are free, and
    a client-acting session of one env reserves and fills them; the rollout is complete and trained."""
    rollouts: list[dict] = []
    learner = split_by_a_vector_session(rollouts)
    try:
        learner.submit([Request(Kind.DROP, 1), Request(Kind.DROP, 2)])
        reply, rng = learner.begin_uploads(9, 1).result(10), np.random.default_rng(0)
        for _ in range(2):  # row 2 of the head, then row 3 of the tail: a segment, and a reply, each
            assert reply.steps == 1
            no = np.zeros((1, 1), bool)
            experience = Experience.of(rng.normal(size=(2, 1, 4)).astype(np.float32), rng.integers(0, 2, (1, 1)),
                                       np.ones((1, 1)), no, no, [[None]], reply.policy_version)
            reply = learner.learn_experience(9, experience).result(10)
            assert reply.accepted == 1
    finally:
        learner.close()
    assert len(rollouts) == 1 and list(rollouts[0]["episode_starts"][:, 0]) == [1.0, 1.0, 1.0, 1.0]
