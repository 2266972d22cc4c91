"""Issue 48, M3: a session that goes quiet in the middle of evaluation episodes hands them back to the agent's
period (`Serving.evaluation_hold_seconds`), so the period is finished by the clients still there instead of
staying open until the quiet session expires; and a client-acting session is never given evaluation blocks
while the period has no episode left to start (they would go unlearned)."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np

from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.graph.local import LocalClient, serving_here
from shepherd.graph.schedule import PhaseTracker
from shepherd.level import Phase
from shepherd.storage import Store

PPO = {"n_envs": 1, "n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0, "policy_kwargs": {"net_arch": [8]}}
OBS = np.zeros(4, dtype=np.float32)


async def test_a_quiet_sessions_evaluation_episode_is_handed_back_and_the_stayer_finishes_the_period(tmp_path):
    graph = GraphManager(owner="tests", agents=[AgentSpec("pole", "PPO", [[4], "-inf", "inf"], 2, dict(PPO))],
                         schedule=Schedule(steps_between_evaluation_periods=4, evaluation_episodes=1,
                                           checkpoint_every_seconds=3600.0))
    store = Store(tmp_path / "data")
    key = graph.create_graph(store, dataclasses.replace(serving_here(), evaluation_hold_seconds=0.0))["pole"]
    runtime = graph.runtime()
    quiet, stayer = LocalClient(graph, key), LocalClient(graph, key)
    try:
        quiet.login()
        stayer.login()
        await quiet.step(OBS, 0.0, False)
        for _ in range(4):  # four training steps open the period
            await quiet.step(OBS, 1.0, False)
        await quiet.step(OBS, 1.0, True)
        await quiet.step(OBS, 0.0, False)  # the quiet session's next episode is the period's one evaluation
        assert quiet.session.level.lifecycle.episodes[0].phase is Phase.EVALUATE
        await stayer.step(OBS, 0.0, False)
        assert stayer.session.level.lifecycle.episodes[0].phase is Phase.TRAIN
        stayer.session.active()  # the stayer is busy; the quiet session says nothing from here on
        await asyncio.sleep(0.01)
        graph.expire_sessions(idle_seconds=600)  # the sweep: nothing expires, the quiet one hands back
        assert quiet.session.level.lifecycle.episodes[0].phase is Phase.DEPLOY  # it goes on, greedy, unrecorded
        assert runtime.tracker.to_start == 1 and runtime.tracker.running == 0
        await stayer.step(OBS, 1.0, True)
        await stayer.step(OBS, 0.0, False)  # the stayer's next episode takes the evaluation
        assert stayer.session.level.lifecycle.episodes[0].phase is Phase.EVALUATE
        for _ in range(2):
            await stayer.step(OBS, 1.0, False)
        await stayer.step(OBS, 1.0, True)
        assert [len(result.returns) for result in runtime.evaluations] == [1]  # the period closed, of the stayer
        assert runtime.evaluations[0].returns == (3.0,)
        await quiet.step(OBS, 1.0, True)  # the handed-back episode ends: a deployment record, not an evaluation
        assert len(runtime.evaluations) == 1
        runtime.checkpoint().result(30)
        assert [r.phase for r in store.returns(runtime.record.id)] == ["train", "train", "evaluate", "deploy"]
    finally:
        graph.end_sessions()
        await asyncio.to_thread(graph.close)
        store.close()


def test_the_next_phase_is_training_once_the_periods_episodes_have_all_started():
    tracker = PhaseTracker(Schedule(steps_between_evaluation_periods=2, evaluation_episodes=1))
    tracker.count_step(Phase.TRAIN, 2)
    assert tracker.next_phase is Phase.EVALUATE and tracker.begin_episode() is Phase.EVALUATE
    # another session holds the period's one episode: the phase shown is still evaluation, but a new block or
    # episode trains (a client-acting session's blocks were evaluation blocks, none learned, until it ended)
    assert tracker.phase is Phase.EVALUATE and tracker.next_phase is Phase.TRAIN
