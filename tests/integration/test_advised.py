"""Advised agents in-process: a learner per named client, names that outlive a restart, clear refusals of
bad and missing names, a failing client that fails alone, a new client starting from the best one, and
advisors chosen by recent evaluation returns."""

from __future__ import annotations

import asyncio
import copy
import statistics
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch as th

from shepherd.agents import AgentFailed
from shepherd.graph import AdvisedAgent, AgentSpec, BadClient, GraphManager, Schedule
from shepherd.graph.advised import TRIAL_EPISODES
from shepherd.graph.local import drive, serving_here
from shepherd.storage import Store

PPO = {"n_envs": 1, "n_steps": 16, "batch_size": 16, "n_epochs": 1, "seed": 0, "policy_kwargs": {"net_arch": [8]}}


def advised_graph(**parameters: object) -> GraphManager:
    return GraphManager(owner="tests", agents=[
        AgentSpec("arms", "PPO", [[4], "-inf", "inf"], 2, {**PPO, **parameters}, sharing="advised"),
        AgentSpec("pool", "PPO", [[4], "-inf", "inf"], 2, dict(PPO))],
        schedule=Schedule(steps_between_evaluation_periods=10_000, evaluation_episodes=1,
                          checkpoint_every_steps=50, checkpoint_every_seconds=3600.0))


async def start(data: Path, **parameters: object) -> tuple[GraphManager, Store, dict[str, str]]:
    graph, store = advised_graph(**parameters), Store(data)
    keys = graph.create_graph(store, serving_here())
    if not keys:
        keys = {record.name: store.add_api_key(record.id, "tests")[0] for record in store.agents()}
    return graph, store, keys


async def stop(graph: GraphManager, store: Store) -> None:
    graph.end_sessions()
    await asyncio.to_thread(graph.close)
    store.close()


def policy_weights(graph: GraphManager, client: str) -> dict[str, np.ndarray]:
    runtime = graph.preset_agent("arms", AdvisedAgent).clients[client]
    runtime.checkpoint().result(30)  # the learner handled everything before it
    return {k: v.detach().numpy().copy() for k, v in runtime.learner.algorithm.model.policy.state_dict().items()}


async def drive_clients(graph, key, names, steps, seeded=False):
    """Drive a CartPole client of each name at once for ``steps`` steps (with seed = its index, if ``seeded``)."""
    await asyncio.gather(*(drive(graph, key, gym.make("CartPole-v1"), steps=steps, client_name=name,
                                 **({"seed": i} if seeded else {})) for i, name in enumerate(names)))


async def test_each_client_name_has_its_learner_and_keeps_it_across_a_restart(tmp_path):
    graph, store, keys = await start(tmp_path / "data")
    try:
        await asyncio.gather(drive(graph, keys["arms"], gym.make("CartPole-v1"), steps=40, seed=0, client_name="arm-1"),
                             drive(graph, keys["arms"], gym.make("CartPole-v1"), steps=20, seed=1, client_name="arm-2"))
        advised = graph.preset_agent("arms", AdvisedAgent)
        assert sorted(advised.clients) == ["arm-1", "arm-2"]
        one, two = advised.clients["arm-1"], advised.clients["arm-2"]
        assert one.learner is not two.learner
        steps = {name: runtime.tracker.steps for name, runtime in advised.clients.items()}
        assert steps["arm-1"] >= 40 and 20 <= steps["arm-2"] < 40  # each learner counts its own client
        one.recent_return = 42.0
        kept = policy_weights(graph, "arm-1")
        status = graph.served.status(store.agent(one.record.id))
        assert [row["client"] for row in status.clients or []] == ["arm-1", "arm-2"]
    finally:
        await stop(graph, store)

    graph, store, keys = await start(tmp_path / "data")
    try:
        advised = graph.preset_agent("arms", AdvisedAgent)
        assert sorted(advised.clients) == ["arm-1", "arm-2"]  # restored before any login
        assert advised.clients["arm-1"].tracker.steps == steps["arm-1"]
        assert advised.clients["arm-1"].recent_return == 42.0
        restored = policy_weights(graph, "arm-1")
        assert all(np.array_equal(kept[name], restored[name]) for name in kept)
        assert (tmp_path / "data" / "agents" / str(advised.record.id) / "clients" / "arm-2" / "model.zip").exists()
    finally:
        await stop(graph, store)


async def test_bad_and_missing_client_names_are_refused_clearly(tmp_path):
    graph, store, keys = await start(tmp_path / "data")
    try:
        with pytest.raises(BadClient, match="names its client"):
            graph.login(keys["arms"])
        with pytest.raises(BadClient, match="has no client yet"):
            graph.login(keys["arms"], evaluate_only=True)
        for bad in ("", "../etc", "a/b", "x" * 65, ".hidden", 7):
            with pytest.raises(BadClient, match="'client' must"):
                graph.login(keys["arms"], client=bad)  # type: ignore[arg-type]
        with pytest.raises(BadClient, match="pooled"):
            graph.login(keys["pool"], client="arm-1")
        assert graph.preset_agent("arms", AdvisedAgent).clients == {}
    finally:
        await stop(graph, store)


async def test_a_failing_client_learner_fails_alone(tmp_path):
    graph, store, keys = await start(tmp_path / "data")
    try:
        await drive_clients(graph, keys["arms"], ("arm-1", "arm-2"), steps=5)
        advised = graph.preset_agent("arms", AdvisedAgent)

        def broken(requests):
            raise RuntimeError("a broken learner")

        advised.clients["arm-1"].learner.algorithm.process = broken  # type: ignore[method-assign]
        with pytest.raises(AgentFailed):
            await drive(graph, keys["arms"], gym.make("CartPole-v1"), steps=5, client_name="arm-1")
        assert advised.clients["arm-1"].learner.failure is not None
        with pytest.raises(AgentFailed, match="arms/arm-1"):
            graph.login(keys["arms"], client="arm-1")
        before = advised.clients["arm-2"].tracker.steps
        await drive(graph, keys["arms"], gym.make("CartPole-v1"), steps=30, client_name="arm-2")
        assert advised.clients["arm-2"].tracker.steps >= before + 30 and advised.clients["arm-2"].learner.failure is None
        await drive(graph, keys["arms"], gym.make("CartPole-v1"), steps=5, client_name="arm-3")  # new ones too
    finally:
        await stop(graph, store)


async def test_a_new_client_starts_from_the_best_clients_weights_and_is_advised_by_it(tmp_path):
    graph, store, keys = await start(tmp_path / "data")
    try:
        await drive_clients(graph, keys["arms"], ("good", "poor"), steps=40, seeded=True)
        advised = graph.preset_agent("arms", AdvisedAgent)
        good, poor = advised.clients["good"], advised.clients["poor"]
        good.recent_return, poor.recent_return = 200.0, 20.0  # what their evaluations would have said
        best_weights, poor_weights = policy_weights(graph, "good"), policy_weights(graph, "poor")
        assert any(not np.array_equal(best_weights[k], poor_weights[k]) for k in best_weights)

        await drive(graph, keys["arms"], gym.make("CartPole-v1"), steps=1, client_name="new")
        new = advised.clients["new"]
        assert new.tracker.steps <= 1
        start_weights = {k: v.detach().numpy() for k, v in new.learner.algorithm.model.policy.state_dict().items()}
        assert all(np.array_equal(best_weights[k], start_weights[k]) for k in best_weights)

        advised.choose_advisors()
        advisor = {name: getattr(runtime.learner.algorithm.advice.advisor, "name", None)
                   for name, runtime in advised.clients.items()}
        assert advisor == {"good": None, "poor": "good", "new": "good"}
        session = graph.login(keys["arms"], evaluate_only=True)  # no name: the best client's
        assert session.runtime is good
        graph.logout(session.key)
    finally:
        await stop(graph, store)


async def teacher_and_pupil(graph, keys, strength=None, returns=(300.0, 10.0), trials=False):
    """Clients "teacher" and "pupil" of agent "arms" with these recent returns, the teacher advising the
    pupil (at ``strength``, if given); without ``trials`` the pupil's trial of the teacher is dropped."""
    await drive_clients(graph, keys["arms"], ("teacher", "pupil"), steps=10)
    advised = graph.preset_agent("arms", AdvisedAgent)
    teacher, pupil = advised.clients["teacher"], advised.clients["pupil"]
    teacher.recent_return, pupil.recent_return = returns
    advised.choose_advisors()
    if not trials:
        pupil.trials.clear()  # these tests look at the pupil's own acts
    if strength is not None:
        pupil.learner.algorithm.advice.strength = strength
    return teacher, pupil


class Recorded(gym.ActionWrapper):
    """CartPole, recording the pushes it is given."""

    def __init__(self, pushes: list[int]) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.pushes = pushes

    def action(self, action):
        self.pushes.append(int(action))
        return action


async def teach(graph, keys, teacher, push: int) -> None:
    """Make the teacher's policy sure of ``push``, then let it learn one update (16 steps): a new version,
    published for whoever asked for its weights (an update hardly moves a bias of 10)."""
    with th.no_grad():
        teacher.learner.algorithm.model.policy.action_net.bias[:] = th.as_tensor([-10.0, 10.0] if push else [10.0, -10.0])
    version = teacher.learner.algorithm.version
    await drive(graph, keys["arms"], gym.make("CartPole-v1"), steps=16, seed=7, client_name=str(teacher.client))
    teacher.checkpoint().result(30)
    assert teacher.learner.algorithm.version > version


async def test_advised_learner_acts_with_the_advisors_policy(tmp_path):
    """With a strong advisor, the advisee's actions follow the advisor's: its rollout rows hold the advice."""
    graph, store, keys = await start(tmp_path / "data")
    try:
        teacher, pupil = await teacher_and_pupil(graph, keys, strength=5.0)
        await teach(graph, keys, teacher, push=1)  # a teacher sure of action 1: its advice outweighs the pupil's
        await drive(graph, keys["arms"], gym.make("CartPole-v1"), steps=12, seed=3, client_name="pupil")
        pupil.checkpoint().result(30)
        algorithm = pupil.learner.algorithm
        buffer = algorithm.buffer
        rows = int(algorithm.segments.position[0])
        assert rows > 0 and np.any(buffer.advice[:rows, 0] != 0)
        assert np.all(buffer.actions[:rows, 0, 0] == 1)
        assert np.all(buffer.advice[:rows, 0, 1] - buffer.advice[:rows, 0, 0] > 50)  # 5 * (log p1 - log p0)
    finally:
        await stop(graph, store)


async def test_greedy_acts_are_the_clients_own_policy_not_the_advised_one(tmp_path):
    """An evaluation measures the client's own policy (what it lends as an advisor, what its export holds):
    a confident advisor shapes the pupil's training acts, not its greedy ones."""
    graph, store, keys = await start(tmp_path / "data")
    try:
        teacher, pupil = await teacher_and_pupil(graph, keys, strength=50.0)
        pupil.checkpoint().result(30)
        teacher.checkpoint().result(30)
        await teach(graph, keys, teacher, push=1)  # the teacher is sure of action 1, the pupil of action 0
        with th.no_grad():
            pupil.learner.algorithm.model.policy.action_net.bias[:] = th.as_tensor([10.0, -10.0])
        pushes: list[int] = []
        await drive(graph, keys["arms"], Recorded(pushes), episodes=1, evaluate=True, seed=3, client_name="pupil")
        assert pushes and set(pushes) == {0}  # its own policy alone
        pushes.clear()
        await drive(graph, keys["arms"], Recorded(pushes), steps=8, seed=3, client_name="pupil")
        assert pushes and set(pushes) == {1}  # training: the mixed policy, the advisor's pull outweighs
    finally:
        await stop(graph, store)


async def test_a_client_refuses_an_advisor_whose_advice_lowered_its_returns(tmp_path):
    from shepherd.graph.advised import JUDGE_EPISODES
    from shepherd.level import Phase
    graph, store, keys = await start(tmp_path / "data")
    try:
        await drive_clients(graph, keys["arms"], ("wrong", "pupil", "other"), steps=10)
        advised = graph.preset_agent("arms", AdvisedAgent)
        wrong, pupil, other = (advised.clients[n] for n in ("wrong", "pupil", "other"))
        wrong.recent_return, other.recent_return, pupil.recent_return = 500.0, 200.0, 50.0
        advice = pupil.learner.algorithm.advice

        def trained(returns):  # training episodes as the runtime records them
            for value in returns:
                pupil.train_returns.append(value)
                pupil.phase_episodes[Phase.TRAIN] += 1

        trained([30.0] * JUDGE_EPISODES)  # before any advice: averaging 30
        advised.choose_advisors()
        assert advice.advisor.name == "wrong" and advice.advisor.recent_return == 500.0
        assert advice.own_return == 50.0
        assert advice.strength_at(0) == pytest.approx(advice.strength * 0.9)  # 1 - 50/500 of it

        trained([10.0] * (JUDGE_EPISODES - 1))  # too few to judge
        advised.choose_advisors()
        assert advice.advisor.name == "wrong" and advised.refused["pupil"] == {}
        trained([10.0])  # JUDGE_EPISODES under it, averaging below the 30 before it
        advised.choose_advisors()
        assert advised.refused["pupil"] == {"wrong": 500.0}
        assert advice.advisor.name == "other"  # the best it has not refused
        trained([120.0] * JUDGE_EPISODES)  # this advice helps (the 10s before it): kept
        advised.choose_advisors()
        assert advice.advisor.name == "other" and "other" not in advised.refused["pupil"]
        pupil.recent_return = 250.0  # better than every advisor it has not refused: none
        advised.choose_advisors()
        assert advice.advisor is None and advice.own_return == 250.0
    finally:
        await stop(graph, store)


async def test_a_trial_plays_the_advisors_greedy_policy_on_the_clients_system_and_a_clear_win_is_adopted(tmp_path):
    """After its advisors are chosen, a client's next training episode is played by its advisor's greedy
    policy on the client's own system, unlearned and uncounted; a trial that returns clearly more than the
    client's own recent evaluation makes the client take the advisor's weights after its next update."""
    from shepherd.level import Phase
    graph, store, keys = await start(tmp_path / "data")
    try:
        # every CartPole episode returns 8 or more: more than 0 by ADOPT_GAIN of 4
        teacher, pupil = await teacher_and_pupil(graph, keys, returns=(4.0, 0.0), trials=True)
        advised = graph.preset_agent("arms", AdvisedAgent)
        assert [trial.tried for trial in pupil.trials] == ["teacher"] and not teacher.trials
        teacher_weights = policy_weights(graph, "teacher")  # read by the pupil from the teacher's checkpoint
        steps, teacher_steps, version = pupil.tracker.steps, teacher.tracker.steps, pupil.learner.algorithm.version
        trial = await drive(graph, keys["arms"], gym.make("CartPole-v1"), episodes=TRIAL_EPISODES, seed=3,
                            client_name="pupil")
        assert advised.tried["pupil"]["teacher"] == (4.0, pytest.approx(sum(trial) / TRIAL_EPISODES))
        assert pupil.phase_episodes[Phase.TRIAL] == TRIAL_EPISODES and pupil.phase_steps[Phase.TRIAL] == sum(trial)
        assert pupil.tracker.steps == steps and teacher.tracker.steps == teacher_steps  # nobody's training steps
        assert pupil.learner.algorithm.version == version  # nothing learned from it
        returns = store.returns(pupil.record.id, client="pupil")
        assert [(r.phase, r.value) for r in returns][-TRIAL_EPISODES:] == [("trial", value) for value in trial]
        adoption = pupil.learner.algorithm.advice.adopt
        assert adoption.advisor == "teacher" and pupil.learner.algorithm.adoptions == 0  # (its first request)
        assert adoption.weights is not None  # the very policy tried, frozen

        await drive(graph, keys["arms"], gym.make("CartPole-v1"), steps=10, seed=4, client_name="pupil")
        pupil.checkpoint().result(30)  # its learner handled every step before it
        algorithm = pupil.learner.algorithm
        assert algorithm.adoptions == 1 and algorithm.version == version + 1  # one update (16 rows), then adopted
        own = {k: v.detach().numpy() for k, v in algorithm.model.policy.state_dict().items()}
        assert all(np.array_equal(teacher_weights[k], own[k]) for k in teacher_weights)
    finally:
        await stop(graph, store)


async def test_a_trial_plays_the_policy_as_it_was_when_the_trial_began_and_adopts_that_one(tmp_path, monkeypatch):
    """The advisor learns on while its trial is played (its own clients go on): every episode of a trial
    of 3 is played by the advisor's policy as it was when the trial began, and that policy is the one adopted."""
    from shepherd.graph.advised import advising as advised_agents
    monkeypatch.setattr(advised_agents, "TRIAL_EPISODES", 3)
    graph, store, keys = await start(tmp_path / "data")
    try:
        teacher, pupil = await teacher_and_pupil(graph, keys, returns=(4.0, 0.0), trials=True)
        await teach(graph, keys, teacher, push=1)
        tried = policy_weights(graph, "teacher")
        pushes: list[int] = []
        await drive(graph, keys["arms"], Recorded(pushes), episodes=1, seed=3, client_name="pupil")
        assert [trial.tried for trial in pupil.trials] == ["teacher"]  # its next episodes go on with the trial
        await teach(graph, keys, teacher, push=0)  # the teacher's policy now pushes the other way
        await drive(graph, keys["arms"], Recorded(pushes), episodes=2, seed=4, client_name="pupil")
        assert not pupil.trials and pushes and set(pushes) == {1}  # every step: the policy the trial began with
        adopt = pupil.learner.algorithm.advice.adopt  # ~9.5 a CartPole episode, clearly more than 0
        assert adopt is not None and adopt.advisor == "teacher"
        await drive(graph, keys["arms"], gym.make("CartPole-v1"), steps=20, seed=5, client_name="pupil")
        pupil.checkpoint().result(30)
        assert pupil.learner.algorithm.adoptions == 1
        own = {k: v.detach().numpy() for k, v in pupil.learner.algorithm.model.policy.state_dict().items()}
        assert all(np.array_equal(tried[k], own[k]) for k in tried)  # the tried policy, not the teacher's now
    finally:
        await stop(graph, store)


class FallsLeft(Recorded):
    """CartPole where a push to the left ends the episode at once (a system on which a policy that pushes
    left fails, whatever it returns on its own)."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated or int(action) == 0, truncated, info


async def test_a_new_client_tries_every_rated_policy_on_its_system_and_adopts_one_that_works_there(tmp_path):
    """A client plugged in after the others were rated starts from the best one's weights, but its first
    episodes play each rated client's greedy policy on its own system (best evaluation first, unlearned);
    then the best-rated client whose policy did not clearly fail there becomes its advisor, and the client
    adopts that very policy before it learns a step."""
    from shepherd.level import Phase
    graph, store, keys = await start(tmp_path / "data")
    try:
        teacher, pupil = await teacher_and_pupil(graph, keys, returns=(4.0, 3.0))
        advised = graph.preset_agent("arms", AdvisedAgent)
        await teach(graph, keys, teacher, push=0)  # the best-rated client's policy pushes left
        await teach(graph, keys, pupil, push=1)  # the other's right
        right = policy_weights(graph, "pupil")
        teacher.recent_return, pupil.recent_return = 4.0, 3.0  # their evaluations (a teach drives no evaluation)
        pushes: list[int] = []
        await drive(graph, keys["arms"], FallsLeft(pushes), episodes=1, seed=3, client_name="new")
        new = advised.clients["new"]
        assert [trial.tried for trial in new.trials] == ["pupil"]  # the teacher's tried first: 1 push, 1 step
        assert pushes == [0]
        await drive(graph, keys["arms"], FallsLeft(pushes), episodes=1, seed=4, client_name="new")
        assert not new.trials and set(pushes[1:]) == {1} and len(pushes) > 3
        assert new.phase_episodes[Phase.TRIAL] == 2 and new.tracker.steps == 0  # nothing learned, nothing counted
        assert advised.tried["new"]["teacher"][1] == 1.0
        algorithm = new.learner.algorithm
        assert algorithm.advice.advisor.name == "pupil"  # the teacher's policy failed here, clearly
        assert algorithm.advice.adopt is not None and algorithm.advice.adopt.advisor == "pupil"
        await drive(graph, keys["arms"], FallsLeft(pushes), steps=1, seed=5, client_name="new")
        new.checkpoint().result(30)
        assert algorithm.adoptions == 1 and algorithm.version == 1  # adopted before its first update: a version of its own
        own = {k: v.detach().numpy() for k, v in algorithm.model.policy.state_dict().items()}
        assert all(np.array_equal(right[k], own[k]) for k in right)
    finally:
        await stop(graph, store)


async def test_a_new_client_stops_trying_once_a_policy_does_as_well_as_any_evaluation(tmp_path):
    """A plug-in trial that returns at least the best recent evaluation of the clients tried ends the
    trials: the others are not played (each would cost an unlearned episode), and the client adopts that
    policy before it learns a step."""
    from shepherd.level import Phase
    graph, store, keys = await start(tmp_path / "data")
    try:
        teacher, pupil = await teacher_and_pupil(graph, keys, returns=(4.0, 3.0))
        advised = graph.preset_agent("arms", AdvisedAgent)
        await teach(graph, keys, teacher, push=0)  # pushes left: CartPole lasts ~10 steps, more than 4
        await teach(graph, keys, pupil, push=1)
        left = policy_weights(graph, "teacher")
        teacher.recent_return, pupil.recent_return = 4.0, 3.0
        pushes: list[int] = []
        await drive(graph, keys["arms"], Recorded(pushes), episodes=1, seed=3, client_name="new")
        new = advised.clients["new"]
        assert set(pushes) == {0} and len(pushes) > 4  # the teacher's trial, and no other
        assert not new.trials and new.phase_episodes[Phase.TRIAL] == 1 and new.tracker.steps == 0
        assert list(advised.tried["new"]) == ["teacher"] and "new" not in advised.plugging
        algorithm = new.learner.algorithm
        assert algorithm.advice.advisor.name == "teacher" and algorithm.advice.adopt.advisor == "teacher"
        await drive(graph, keys["arms"], Recorded(pushes), steps=1, seed=5, client_name="new")
        new.checkpoint().result(30)
        assert algorithm.adoptions == 1 and algorithm.version == 1
        own = {k: v.detach().numpy() for k, v in algorithm.model.policy.state_dict().items()}
        assert all(np.array_equal(left[k], own[k]) for k in left)
    finally:
        await stop(graph, store)


async def test_a_new_client_adopts_the_policy_it_tried_even_if_an_untried_one_is_rated_higher_by_then(tmp_path):
    """The evaluations move while a new client plays its plug-in trials: here the teacher's trial does as well as
    any evaluation (the pupil's is not played), and by its end the pupil is rated higher. The new client is
    advised by, and adopts, the policy that did well on its system, not the untried one (it adopted nothing)."""
    graph, store, keys = await start(tmp_path / "data")
    try:
        teacher, pupil = await teacher_and_pupil(graph, keys, returns=(4.0, 3.0))
        advised = graph.preset_agent("arms", AdvisedAgent)
        await teach(graph, keys, teacher, push=0)
        await teach(graph, keys, pupil, push=1)
        left = policy_weights(graph, "teacher")
        teacher.recent_return, pupil.recent_return = 4.0, 3.0

        class Rising(Recorded):
            def action(self, action):
                pupil.recent_return = 6.0  # the pupil's evaluation rises during the new client's trial
                return super().action(action)

        pushes: list[int] = []
        await drive(graph, keys["arms"], Rising(pushes), episodes=1, seed=3, client_name="new")
        new = advised.clients["new"]
        assert set(pushes) == {0} and len(pushes) > 6  # the teacher's trial, as good as any evaluation
        assert list(advised.tried["new"]) == ["teacher"] and "new" not in advised.plugging
        algorithm = new.learner.algorithm
        assert algorithm.advice.advisor.name == "teacher"
        assert algorithm.advice.adopt is not None and algorithm.advice.adopt.advisor == "teacher"
        await drive(graph, keys["arms"], Recorded(pushes), steps=1, seed=5, client_name="new")
        new.checkpoint().result(30)
        assert algorithm.adoptions == 1 and algorithm.adopted_at == 0
        own = {k: v.detach().numpy() for k, v in algorithm.model.policy.state_dict().items()}
        assert all(np.array_equal(left[k], own[k]) for k in left)
        advised.choose_advisors()  # with no evaluation of its own yet, it keeps the advisor it tried
        assert algorithm.advice.advisor.name == "teacher"
    finally:
        await stop(graph, store)


async def test_an_advisor_whose_trial_did_no_better_is_ruled_out_until_its_evaluation_rises(tmp_path):
    graph, store, keys = await start(tmp_path / "data")
    try:
        # no CartPole episode returns 1000 here
        teacher, pupil = await teacher_and_pupil(graph, keys, returns=(2000.0, 1000.0), trials=True)
        advised = graph.preset_agent("arms", AdvisedAgent)
        advice = pupil.learner.algorithm.advice
        assert advice.advisor.name == "teacher"
        await drive(graph, keys["arms"], gym.make("CartPole-v1"), episodes=TRIAL_EPISODES, seed=3, client_name="pupil")
        assert advice.advisor is None and advice.adopt is None  # ruled out by the trial, not adopted
        advised.choose_advisors()
        assert advice.advisor is None and not pupil.trials
        teacher.recent_return = 2500.0  # it improved: advised, and tried again
        advised.choose_advisors()
        assert advice.advisor.name == "teacher" and [trial.tried for trial in pupil.trials] == ["teacher"]
    finally:
        await stop(graph, store)


async def test_independent_clients_run_no_trials(tmp_path):
    graph, store, keys = await start(tmp_path / "data", advice_strength=0.0)
    try:
        await drive_clients(graph, keys["arms"], ("teacher", "pupil"), steps=10)
        advised = graph.preset_agent("arms", AdvisedAgent)
        advised.clients["teacher"].recent_return, advised.clients["pupil"].recent_return = 4.0, 0.0
        advised.choose_advisors()
        assert not advised.clients["pupil"].trials
    finally:
        await stop(graph, store)


async def test_a_trial_abandoned_mid_episode_is_tried_again_on_the_next_episode(tmp_path):
    from shepherd.level import Phase
    graph, store, keys = await start(tmp_path / "data")
    try:
        teacher, pupil = await teacher_and_pupil(graph, keys, returns=(4.0, 0.0), trials=True)
        await drive(graph, keys["arms"], gym.make("CartPole-v1"), steps=2, seed=3, client_name="pupil")  # logs out mid-trial
        assert [trial.tried for trial in pupil.trials] == ["teacher"]
        assert pupil.phase_steps[Phase.TRIAL] == 2 and pupil.phase_episodes[Phase.TRIAL] == 0
        await drive(graph, keys["arms"], gym.make("CartPole-v1"), episodes=TRIAL_EPISODES, seed=3, client_name="pupil")
        assert not pupil.trials and pupil.phase_episodes[Phase.TRIAL] == TRIAL_EPISODES
        assert "teacher" in graph.preset_agent("arms", AdvisedAgent).tried["pupil"]
    finally:
        await stop(graph, store)


def cartpole_states(count: int) -> np.ndarray:
    """States CartPole visits under random pushes (seeded): where the policies are compared."""
    env, states = gym.make("CartPole-v1"), []
    env.action_space.seed(0)
    obs, _ = env.reset(seed=0)
    while len(states) < count:
        states.append(obs)
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()
    return np.array(states, dtype=np.float32)


async def adopt_then_learn(data: Path, **parameters: object) -> float:
    """The pupil adopts the teacher's policy, then learns 12 updates on its own (at a learning rate that
    moves a policy fast); returns the mean KL(adopted || pupil's policy now) on CartPole observations."""
    from shepherd.agents.sb3.mixing import policy_divergence
    graph, store, keys = await start(data, learning_rate=0.05, **parameters)
    try:
        teacher, pupil = await teacher_and_pupil(graph, keys, returns=(4.0, 0.0), trials=True)
        await drive(graph, keys["arms"], gym.make("CartPole-v1"), episodes=TRIAL_EPISODES, seed=3,
                    client_name="pupil")  # the trial
        await drive(graph, keys["arms"], gym.make("CartPole-v1"), steps=10, seed=4, client_name="pupil")
        pupil.checkpoint().result(30)
        algorithm = pupil.learner.algorithm
        assert algorithm.adoptions == 1
        adopted = copy.deepcopy(algorithm.advisor_policy.policy)  # the teacher's: no Mixer installed on it
        await drive(graph, keys["arms"], gym.make("CartPole-v1"), steps=12 * 16, seed=5, client_name="pupil")
        pupil.checkpoint().result(30)
        observations = th.as_tensor(cartpole_states(256))
        with th.no_grad():
            return float(policy_divergence(adopted.get_distribution(observations),
                                           algorithm.model.policy.get_distribution(observations)))
    finally:
        await stop(graph, store)


async def test_an_adopted_policy_is_kept_for_advice_keep_steps(tmp_path):
    """With ``advice_keep``, the pupil's own updates after adopting are pulled back towards the adopted
    policy (distillation after each update); without it they carry the pupil away from it."""
    # the median of three runs each: one run's result has a tail (the learners' threads share numpy's and torch's
    # random draws, so runs differ); a fresh-clone run of the whole suite on a busy machine had one run's kept at
    # 1.4e-2 (2026-11-24)
    kept = statistics.median([await adopt_then_learn(tmp_path / f"kept-{run}", advice_keep=10_000) for run in range(3)])
    free = statistics.median([await adopt_then_learn(tmp_path / f"free-{run}") for run in range(3)])
    # on states CartPole visits, one run each, measured over 14 runs: kept 5e-4 to 3.4e-3; free 1.2e-2 to 0.17; kept
    # with the distillation disabled 1.2e-2 to 5.5e-2. 12 runs more (2026-11-24): kept 1.5e-4 to 5.4e-3, free 1.4e-2 to
    # 0.20; one CI run had free at 5.8e-3, which failed the former bound free > 6e-3. 9 runs more (2026-11-24, 4 of them
    # beside 3 busy loops on the 2 cores): kept 4.8e-4 to 3.4e-3, free 1.3e-2 to 8.9e-2
    assert kept < 8e-3
    assert kept < free / 2  # the updates moved the free policy more than twice as far: there was something to keep
