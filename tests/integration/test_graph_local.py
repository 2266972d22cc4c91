"""The core without HTTP: GraphManager, sessions and runtimes driven in-process by gymnasium CartPole through
shepherd.graph.local, on a tiny PPO budget (a rollout of 2 segments of 16 steps)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from shepherd.graph import AgentSpec, Conflict, GraphManager, PresetError, PresetValidation, Schedule, StepInput
from shepherd.graph.local import LocalClient, drive, make_step, serving_here, validate
from shepherd.graph.validation import NOT_REACHED, REACHED
from shepherd.wire.spaces import SpaceError
from shepherd.storage import Store

PPO = {"n_envs": 2, "n_steps": 16, "batch_size": 32, "n_epochs": 2, "seed": 0, "policy_kwargs": {"net_arch": [16]}}


def tiny_graph(validation: PresetValidation | None = None, **schedule: object) -> GraphManager:
    values = {"steps_between_evaluation_periods": 100, "evaluation_episodes": 2, "checkpoint_every_steps": 100,
              "checkpoint_every_seconds": 3600.0, **schedule}
    return GraphManager(owner="tests", agents=[AgentSpec("pole", "PPO", [[4], "-inf", "inf"], 2, dict(PPO))],
                        schedule=Schedule(**values), validation=validation)


async def start(data: Path, graph: GraphManager | None = None, **serving: object) -> tuple[GraphManager, Store, str]:
    graph = graph or tiny_graph()
    store = Store(data)
    keys = graph.create_graph(store, serving_here(**serving))
    key = keys["pole"] if keys else store.add_api_key(store.agents()[0].id, "tests")[0]
    return graph, store, key


async def stop(graph: GraphManager, store: Store) -> None:
    graph.end_sessions()
    await asyncio.to_thread(graph.close)
    store.close()


def barrier(graph: GraphManager) -> None:
    """Wait until the learner handled everything handed to it so far (a checkpoint is queued behind it)."""
    graph.runtime().checkpoint().result(30)


async def test_two_clients_train_evaluate_and_record_every_episode(tmp_path):
    graph, store, key = await start(tmp_path / "data")
    try:
        runtime = graph.runtime()
        envs = [gym.make("CartPole-v1") for _ in range(2)]
        first, second = await asyncio.gather(*(drive(graph, key, env, episodes=12, seed=index)
                                                for index, env in enumerate(envs)))
        assert len(first) == len(second) == 12 and runtime.sessions == 0  # both logged out
        barrier(graph)
        records = store.returns(runtime.record.id)
        assert sorted(r.value for r in records) == sorted(first + second)  # every episode recorded, once
        train = [r for r in records if r.phase == "train"]
        evaluate = [r for r in records if r.phase == "evaluate"]
        # the tracker counts the training steps of every client, and the learner learned from each of them
        assert runtime.tracker.steps == sum(r.length for r in train) == runtime.learner.steps >= 200
        assert runtime.learner.model._n_updates >= 2 * (runtime.tracker.steps // 32)  # n_epochs per rollout
        assert runtime.learner.algorithm.version >= runtime.tracker.steps // 32 >= 6
        # an evaluation period opens every 100 steps and runs the next 2 episodes greedy, unlearned
        assert runtime.evaluations and evaluate
        # every closed period ran 2 episodes; a period the clients left before its second episode started
        # (both had played their 12) holds the rest
        unclosed = len(evaluate) - 2 * len(runtime.evaluations)
        assert 0 <= unclosed < 2 and (unclosed == 0 or runtime.tracker.to_start == 2 - unclosed)
        period = runtime.evaluations[0]
        assert period.steps >= 100 and len(period.returns) == 2
        assert sorted(period.returns) == sorted(r.value for r in evaluate[:2])
        for env in envs:
            env.close()
    finally:
        await stop(graph, store)


async def test_a_step_limit_abandons_the_open_episode(tmp_path):
    graph, store, key = await start(tmp_path / "data")
    try:
        runtime = graph.runtime()
        env = gym.make("CartPole-v1")
        returns = await drive(graph, key, env, steps=45, seed=3)
        barrier(graph)
        assert runtime.tracker.steps == 45  # the abandoned episode's steps count too
        assert returns == [r.value for r in store.returns(runtime.record.id)] == [17.0]  # its return does not
        assert runtime.sessions == 0
    finally:
        await stop(graph, store)


async def test_evaluate_mode_sessions_are_greedy_and_never_learned_from(tmp_path):
    graph, store, key = await start(tmp_path / "data")
    try:
        runtime = graph.runtime()
        returns = await drive(graph, key, gym.make("CartPole-v1"), episodes=3, evaluate=True, seed=1)
        barrier(graph)
        assert len(returns) == 3 and runtime.tracker.steps == 0 and runtime.learner.steps == 0
        assert {r.phase for r in store.returns(runtime.record.id)} == {"deploy"}
    finally:
        await stop(graph, store)


async def test_a_retried_seq_gets_the_same_action_and_is_recorded_once(tmp_path):
    graph, store, key = await start(tmp_path / "data")
    try:
        runtime = graph.runtime()
        client = LocalClient(graph, key)
        session = client.login()
        env = gym.make("CartPole-v1")
        obs, _ = env.reset(seed=0)
        assert await client.step(obs, 0.0, False) in (0, 1)
        obs, reward, terminated, truncated, _ = env.step(0)
        step = make_step(session.observation_space, obs, reward, terminated, truncated, seq=2)
        acted = await client.send(step)
        again = await client.send(step)  # a retry: same seq, same step
        assert again.action == acted.action and runtime.tracker.steps == 1 and session.level.steps == 1
        with pytest.raises(Conflict):  # the same seq with another step
            await client.send(StepInput(step.obs + 1, step.reward, False, False, 2))
        with pytest.raises(Conflict):  # an older seq
            await client.send(StepInput(step.obs, 1.0, False, False, 1))
        await client.send(StepInput(step.obs, 1.0, False, False, 3))
        assert runtime.tracker.steps == 2
        client.logout()
        assert runtime.sessions == 0
    finally:
        await stop(graph, store)


async def test_observations_are_checked_as_the_http_edge_checks_them(tmp_path):
    graph, store, key = await start(tmp_path / "data")
    try:
        client = LocalClient(graph, key)
        client.login()
        with pytest.raises(SpaceError, match="shape"):
            await client.step(np.zeros(3), 0.0, False)
        with pytest.raises(SpaceError, match="NaN"):
            await client.step(np.array([0.0, np.nan, 0.0, 0.0]), 0.0, False)
        with pytest.raises(SpaceError, match="reward"):
            await client.step(np.zeros(4), float("inf"), False)
        with pytest.raises(SpaceError, match="reward"):
            await client.step(np.zeros(4), "1", False)
        assert graph.runtime().tracker.steps == 0
        # a time limit is bootstrapped only when the episode was not also terminated for real
        space = client.session.observation_space
        assert make_step(space, np.zeros(4), 1.0, False, True).truncated
        assert not make_step(space, np.zeros(4), 1.0, True, True).truncated
        assert make_step(space, np.zeros(4), 1.0, True, True).done
        client.logout()
    finally:
        await stop(graph, store)


async def test_logout_and_expiry_release_the_learners_segments(tmp_path):
    graph, store, key = await start(tmp_path / "data")
    try:
        runtime = graph.runtime()
        runtime.learner.algorithm.handover_timeout = 3600.0  # no handover of stalled segments: only a release
        obs = np.zeros(4, dtype=np.float32)
        holders = [LocalClient(graph, key) for _ in range(2)]
        for holder in holders:  # the rollout's 2 segments, one each
            holder.login()
            await holder.step(obs, 0.0, False)
        third, fourth = LocalClient(graph, key), LocalClient(graph, key)
        third.login()
        waiting = asyncio.create_task(third.step(obs, 0.0, False))
        await asyncio.sleep(0.5)
        assert not waiting.done()  # no free segment
        holders[0].logout()
        assert await asyncio.wait_for(waiting, 10) in (0, 1)  # the logout freed one
        fourth.login()
        waiting = asyncio.create_task(fourth.step(obs, 0.0, False))
        await asyncio.sleep(0.5)
        assert not waiting.done()
        holders[1].session.last_active -= 1000  # idle for long; the others were active just now
        assert graph.expire_sessions(500) == 1
        assert await asyncio.wait_for(waiting, 10) in (0, 1)  # the expiry freed the other
        assert runtime.sessions == 2
        barrier(graph)
        assert set(runtime.learner.algorithm._actors) == {third.session.level.actor_id,
                                                           fourth.session.level.actor_id}
        with pytest.raises(Exception, match="expired"):
            await holders[1].send(StepInput(obs, 1.0, False, False, 2))
    finally:
        await stop(graph, store)


async def test_a_step_that_reaches_a_session_after_it_ended_is_refused_and_begins_nothing(tmp_path):
    """The edge looks a session up, then parses a large body off the event loop: the session may end meanwhile
    (idle expiry, logout, a revoked key). The step is refused; no episode begins on the closed level, no actor is
    left with the learner, no evaluation slot is held."""
    graph, store, key = await start(tmp_path / "data")
    try:
        runtime = graph.runtime()
        client = LocalClient(graph, key)
        client.login()
        session = client.session
        await client.step(np.zeros(4, dtype=np.float32), 0.0, False)
        graph.logout(session.key)  # while the next step's body was being parsed
        with pytest.raises(Exception, match="session ended"):
            await graph.step(session, StepInput(np.zeros(4, dtype=np.float32), 1.0, False, False, 2))
        barrier(graph)
        assert runtime.learner.algorithm._actors == {} and runtime.sessions == 0
    finally:
        await stop(graph, store)


async def test_a_new_graph_manager_resumes_the_checkpoint_on_the_same_data_folder(tmp_path):
    data = tmp_path / "data"
    graph, store, key = await start(data)
    runtime = graph.runtime()
    try:
        await asyncio.gather(*(drive(graph, key, gym.make("CartPole-v1"), steps=130, seed=i) for i in range(2)))
        barrier(graph)
        assert runtime.model_path.is_file()  # written every 100 steps
        steps, learned, updates = runtime.tracker.steps, runtime.learner.steps, runtime.learner.model._n_updates
        period = runtime.tracker.period
        # 260 env steps, less those of the greedy evaluation episodes that began after 100 steps
        assert 100 < steps == learned < 260 and updates > 0 and period >= 1
    finally:
        await stop(graph, store)
    resumed, store, key = await start(data)  # no key is created for an agent the store has
    try:
        runtime = resumed.runtime()
        assert (runtime.tracker.steps, runtime.learner.steps, runtime.learner.model._n_updates) == (steps, learned, updates)
        assert runtime.tracker.period == period
        await drive(resumed, key, gym.make("CartPole-v1"), steps=20, seed=5)
        barrier(resumed)
        assert runtime.tracker.steps == runtime.learner.steps >= steps  # counting goes on from there
    finally:
        await stop(resumed, store)


async def test_the_local_validation_run_is_decided_by_the_graphs_evaluations(tmp_path):
    easy = tiny_graph(PresetValidation("CartPole-v1", target_return=5.0, max_steps=2_000, clients=2))
    graph, store, _ = await start(tmp_path / "easy", easy)
    try:
        started = time.monotonic()
        outcome = await validate(graph, timeout_seconds=60)
        runtime = graph.runtime()
        assert outcome.code == REACHED and outcome.reached, outcome.reason
        first = runtime.evaluations[0]
        assert f"evaluation 1 at {first.steps} steps returned {first.mean_return:.1f}" in outcome.reason
        assert first.mean_return >= 5.0 and time.monotonic() - started < 60
        assert runtime.sessions == 0 and not graph.evaluation_listeners
        assert all(key.revoked for key in store.api_keys(runtime.record.id) if key.label == "local validation")
    finally:
        await stop(graph, store)
    hard = tiny_graph(PresetValidation("CartPole-v1", target_return=1_000.0, max_steps=200, clients=2))
    graph, store, key = await start(tmp_path / "hard", hard)
    try:
        outcome = await validate(graph, key, timeout_seconds=60)
        runtime = graph.runtime()
        assert outcome.code == NOT_REACHED and not outcome.reached, outcome.reason
        assert "target not reached within 200 steps" in outcome.reason
        last = runtime.evaluations[-1]
        assert last.steps >= 200 and len(runtime.evaluations) >= 2  # the one at 100 steps did not decide
        assert f"last evaluation returned {last.mean_return:.1f} < 1000" in outcome.reason
    finally:
        await stop(graph, store)


async def test_a_local_validation_gives_up_after_its_time(tmp_path):
    never = tiny_graph(PresetValidation("CartPole-v1", target_return=1_000.0, max_steps=10**9, clients=1),
                       steps_between_evaluation_periods=None)
    graph, store, key = await start(tmp_path / "data", never)
    try:
        outcome = await validate(graph, key, timeout_seconds=1.0)
        assert outcome.code == NOT_REACHED and outcome.reason.startswith("gave up after")
        assert graph.runtime().tracker.steps > 0 and graph.runtime().sessions == 0
    finally:
        await stop(graph, store)


async def test_a_preset_whose_network_no_longer_fits_the_stored_model_is_refused_before_anything_changes(tmp_path):
    data = tmp_path / "data"
    graph, store, key = await start(data)
    try:
        await drive(graph, key, gym.make("CartPole-v1"), steps=120, seed=0)
        barrier(graph)
        assert graph.runtime().model_path.is_file()
    finally:
        await stop(graph, store)
    wider = GraphManager(owner="tests", agents=[AgentSpec("pole", "PPO", [[4], "-inf", "inf"], 2, {
        **PPO, "policy_kwargs": {"net_arch": [32]}})], schedule=tiny_graph().schedule)
    store = Store(data)
    try:
        stored = store.agents()[0].parameters
        with pytest.raises(PresetError) as raised:
            wider.create_graph(store, serving_here())
        message = str(raised.value)
        assert "agent 'pole'" in message and "no longer fits its saved model" in message
        assert "mlp_extractor.policy_net.0.weight" in message  # what differs, briefly
        assert "agents restart pole" in message and "another name" in message and "--data" in message
        assert store.agents()[0].parameters == stored  # nothing was changed
        assert "Traceback" not in message and len(message.splitlines()) == 1
    finally:
        wider.close()
        store.close()
    graph, store, key = await start(data)  # the old preset still serves its model
    try:
        assert graph.runtime().learner.steps > 0
    finally:
        await stop(graph, store)


class ResetLengths(gym.Wrapper):
    """Notes CartPole's pole half-length at every reset: what a config set before it."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lengths: list[float] = []

    def reset(self, **kwargs):
        self.lengths.append(self.env.unwrapped.length)
        return self.env.reset(**kwargs)


def taught_graph(config: dict) -> GraphManager:
    return GraphManager(owner="tests", agents=[AgentSpec("pole", "PPO", [[4], "-inf", "inf"], 2, dict(PPO),
                                                         lessons=[{"name": "varied", "config": config}])],
                        schedule=Schedule(checkpoint_every_seconds=3600.0))


async def test_drive_applies_each_episodes_config_before_its_reset_as_the_client_does(tmp_path):
    graph, store, key = await start(tmp_path / "data", taught_graph({"length": {"uniform": [0.3, 0.9]}}))
    try:
        env = ResetLengths(gym.make("CartPole-v1"))
        assert len(await drive(graph, key, env, episodes=4, seed=0)) == 4
        barrier(graph)
        configs = [record.config for record in store.returns(graph.runtime().record.id)]
        assert env.lengths[:4] == [config["length"] for config in configs]  # each episode in its own config
        assert len(set(env.lengths)) == 4 and all(0.3 <= length <= 0.9 for length in env.lengths)
        given: list[dict] = []  # a function of the user's sets the env up instead
        await drive(graph, key, gym.make("CartPole-v1"), episodes=2, apply=lambda _, config: given.append(config))
        assert len(given) == 2 and given[0] != given[1] and all(set(config) == {"length"} for config in given)
    finally:
        await stop(graph, store)


async def test_drive_refuses_a_config_name_the_env_does_not_have_in_one_line(tmp_path):
    graph, store, key = await start(tmp_path / "data", taught_graph({"lenght": 0.5}))
    try:
        with pytest.raises(ValueError, match="sets 'lenght', but CartPoleEnv has no attribute 'lenght'") as refused:
            await drive(graph, key, gym.make("CartPole-v1"), episodes=1)
        assert "\n" not in str(refused.value)
    finally:
        await stop(graph, store)
