"""Client-acting sessions' uploads (issue 35) learned as SB3 would: `ThreadedLearner.learn_experience`.

The equivalence test records what SB3's own ``learn()`` drew with 4 envs (every observation, the buffer's
actions, rewards, dones and infos) and uploads exactly that, through the wire format
(`shepherd.wire.experience.parse_experience`), to a learner of the same seed: it must end with ``learn()``'s
weights, within the tolerance of tests/integration/test_sb3_equivalence.py. Time limits are short here, so
the time-limit bootstrap from ``final_obs`` is exercised.

The learner does not draw what the client drew (SB3's ``learn()`` samples actions, draws epsilon and action
noise between its updates, from the same global streams its training then uses), so the recording also
keeps numpy's and torch's random states at the start of each of SB3's ``train()`` calls, and the client sets
them before the upload that completes that training: what is compared is what the learner stores and when
and how much it trains, not the random numbers a client would draw.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import gymnasium as gym
import numpy as np
import orjson
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecEnvWrapper, VecNormalize

from shepherd.agents import ActMode, NotClientActing, StalePolicy, algorithm_info, build_learner, sb3_arguments
from shepherd.agents.algorithm import Control
from shepherd.agents.factories import policy_name
from shepherd.definition import Filters
from shepherd.wire.experience import (EXPERIENCE_FIELDS, BadExperience, Experience, ExperienceSpaces,
                                      parse_experience)
from shepherd.wire.spaces import check_action_mask, parse_space, space_to_json
from shepherd.wire import parse_object

N_ENVS = 4
CASES = {  # env, its time limit, steps (whole rollouts, whole train_freq rounds), parameters
    "PPO": ("CartPole-v1", 30, 512, {"n_steps": 64, "batch_size": 64, "n_epochs": 2, "learning_rate": "lin_0.001"}),
    "A2C": ("CartPole-v1", 30, 224, {"n_steps": 8, "learning_rate": "lin_0.001"}),
    "DQN": ("CartPole-v1", 12, 320, {"learning_rate": 0.005, "learning_starts": 100, "batch_size": 16,  # a rate at
                                     "train_freq": 4, "gradient_steps": 2, "target_update_interval": 50,  # which a
                                     "exploration_fraction": 0.5}),  # time limit's flag shows in the weights
    "SAC": ("Pendulum-v1", 50, 320, {"learning_starts": 100, "batch_size": 16, "train_freq": 2}),
    "TD3": ("Pendulum-v1", 50, 320, {"learning_starts": 100, "batch_size": 16, "action_noise": "normal"}),
}


class Recorder(VecEnvWrapper):
    """Every observation row (reset's, then each step's), reward, done and info of a VecEnv, as copies."""

    def __init__(self, venv) -> None:
        super().__init__(venv)
        self.obs: list[np.ndarray] = []
        self.rewards: list[np.ndarray] = []
        self.dones: list[np.ndarray] = []
        self.infos: list[list[dict]] = []

    def reset(self):
        obs = self.venv.reset()
        assert not self.obs, "learn() resets its env once"
        self.obs.append(np.array(obs))
        return obs

    def step_wait(self):
        obs, rewards, dones, infos = self.venv.step_wait()
        self.obs.append(np.array(obs))
        self.rewards.append(np.array(rewards))  # collect_rollouts adds the bootstrap to its array in place
        self.dones.append(np.array(dones))
        self.infos.append([dict(info) for info in infos])
        return obs, rewards, dones, infos


def record_learn(algorithm: str, env_id: str, limit: int, steps: int, params: dict, wrap=None):
    """SB3's learn() with N_ENVS envs (its VecEnv wrapped by ``wrap``, over the recorder: VecNormalize): its
    model, the recorder, the buffer actions of every step, and the random states at each train() call by
    the steps counted then."""
    recorder = Recorder(make_vec_env(env_id, n_envs=N_ENVS, env_kwargs={"max_episode_steps": limit}))
    env = recorder if wrap is None else wrap(recorder)
    kwargs, _ = sb3_arguments(algorithm, env.action_space, params)
    model = algorithm_info(algorithm).sb3_class(policy_name(env.observation_space, algorithm), env, device="cpu",
                                                **kwargs)
    actions: list[np.ndarray] = []
    buffer = model.rollout_buffer if hasattr(model, "rollout_buffer") else model.replay_buffer
    add, train = buffer.add, model.train

    def recording_add(*args, **kw):
        actions.append(np.array(args[2] if hasattr(model, "replay_buffer") else args[1]))
        return add(*args, **kw)

    states: dict[int, tuple] = {}

    def recording_train(*args, **kw):
        states[model.num_timesteps] = (np.random.get_state(), th.get_rng_state())
        return train(*args, **kw)

    buffer.add, model.train = recording_add, recording_train
    model.learn(steps)
    return model, recorder, actions, states


def upload_body(env: Recorder, actions: list[np.ndarray], start: int, steps: int, version: int,
                sample_shape: tuple[int, ...]) -> bytes:
    """The JSON body of the upload of recorded steps ``start:start+steps``."""
    rows = range(start, start + steps)
    ended = [env.dones[t] for t in rows]
    truncated = [[bool(info.get("TimeLimit.truncated", False)) for info in env.infos[t]] for t in rows]
    return orjson.dumps({
        "session_key": "k", "seq": start, "policy_version": version,
        "obs": [env.obs[t].tolist() for t in range(start, start + steps + 1)],
        "sample": [actions[t].reshape(N_ENVS, *sample_shape).tolist() for t in rows],
        "reward": [env.rewards[t].tolist() for t in rows],
        "terminated": [[bool(d and not c) for d, c in zip(done, cut)] for done, cut in zip(ended, truncated)],
        "truncated": truncated,
        "final_obs": [[info["terminal_observation"].tolist() if done else None for done, info in zip(env.dones[t],
                                                                                                   env.infos[t])]
                      for t in rows]})


def spaces_of(env_id: str, limit: int = 0):
    env = gym.make(env_id)
    return parse_space(space_to_json(env.observation_space)), parse_space(space_to_json(env.action_space))


def replay(algorithm: str, env_id: str, steps: int, params: dict, recorded: Recorder, actions: list[np.ndarray],
           states: dict[int, tuple], filters: Filters | None = None):
    """A learner of the same seed fed the recorded steps as one client-acting session of N_ENVS envs uploads
    them, each upload's body parsed from JSON; the learner, closed."""
    observation_space, action_space = spaces_of(env_id)
    learner = build_learner(algorithm, "uploads", observation_space, action_space, params, steps, filters)
    checks = ExperienceSpaces(observation_space, learner.algorithm.sample_space)
    learner.start()
    try:
        reply = learner.begin_uploads(1, N_ENVS).result(30)
        done = 0
        while done < steps // N_ENVS:
            body = upload_body(recorded, actions, done, reply.steps, reply.policy_version, checks.sample.shape)
            experience = parse_experience(parse_object(body, EXPERIENCE_FIELDS), checks, N_ENVS, reply.steps)
            done += reply.steps
            if done * N_ENVS in states:  # this upload completes one of learn()'s trainings
                np.random.set_state(states[done * N_ENVS][0])
                th.set_rng_state(states[done * N_ENVS][1])
            reply = learner.learn_experience(1, experience).result(60)
            assert reply.accepted == experience.steps * N_ENVS
        assert done * N_ENVS == steps and learner.steps == steps and learner.failure is None
        assert learner.algorithm.version == len(states) > 0
    finally:
        learner.close()
    return learner


@pytest.mark.parametrize("algorithm", list(CASES))
def test_a_client_uploading_what_sb3_learn_drew_ends_with_its_weights(algorithm):
    env_id, limit, steps, params = CASES[algorithm]
    params = {**params, "seed": 5, "n_envs": N_ENVS, "policy_kwargs": {"net_arch": [16]}}
    model, recorded, actions, states = record_learn(algorithm, env_id, limit, steps, params)
    assert any(info.get("TimeLimit.truncated") for row in recorded.infos for info in row), "time limits happen"
    expected = model.policy.state_dict()
    got = replay(algorithm, env_id, steps, params, recorded, actions, states).model.policy.state_dict()
    for name in expected:
        assert th.allclose(expected[name], got[name], rtol=1e-4, atol=1e-5), f"{algorithm}: {name} differs"


def same_statistics(vec_normalize, filtering) -> None:
    """The agent's running statistics are VecNormalize's (its float32 batch moments round at ~1e-7)."""
    ours, theirs = filtering.observations[None], vec_normalize.obs_rms
    assert ours.count == pytest.approx(theirs.count)
    assert np.allclose(ours.mean, theirs.mean, rtol=1e-5, atol=1e-6)
    assert np.allclose(ours.var, theirs.var, rtol=1e-5, atol=1e-6)
    assert filtering.returns.count == pytest.approx(vec_normalize.ret_rms.count)
    assert filtering.returns.var == pytest.approx(float(vec_normalize.ret_rms.var), rel=1e-5)


def test_off_policy_uploads_under_filters_learn_exactly_as_sb3_under_vecnormalize():
    env_id, limit, steps, params = CASES["SAC"]
    params = {**params, "seed": 5, "n_envs": N_ENVS, "policy_kwargs": {"net_arch": [16]}}
    model, recorded, actions, states = record_learn("SAC", env_id, limit, steps, params,
                                                    lambda env: VecNormalize(env, gamma=0.99))
    filters = Filters(normalize_observations=True, normalize_rewards=True)
    learner = replay("SAC", env_id, steps, params, recorded, actions, states, filters)
    expected, got = model.policy.state_dict(), learner.model.policy.state_dict()
    for name in expected:
        assert th.allclose(expected[name], got[name], rtol=1e-4, atol=1e-5), f"SAC: {name} differs"
    same_statistics(model.get_vec_normalize_env(), learner.algorithm.filtering)
    plain = replay("SAC", env_id, steps, params, recorded, actions, states).model.policy.state_dict()
    assert any(not th.allclose(expected[n], plain[n], rtol=1e-4, atol=1e-5) for n in expected), "filters matter"


def test_on_policy_uploads_with_reward_scaling_only_learn_exactly_as_sb3_under_vecnormalize():
    env_id, limit, steps, params = CASES["PPO"]
    params = {**params, "seed": 5, "n_envs": N_ENVS, "policy_kwargs": {"net_arch": [16]}}
    model, recorded, actions, states = record_learn("PPO", env_id, limit, steps, params,
                                                    lambda env: VecNormalize(env, norm_obs=False, gamma=0.99))
    learner = replay("PPO", env_id, steps, params, recorded, actions, states, Filters(normalize_rewards=True))
    expected, got = model.policy.state_dict(), learner.model.policy.state_dict()
    for name in expected:
        assert th.allclose(expected[name], got[name], rtol=1e-4, atol=1e-5), f"PPO: {name} differs"


def test_on_policy_uploads_count_statistics_as_vecnormalize_and_store_what_the_version_saw():
    env_id, limit, steps, params = CASES["PPO"]
    params = {**params, "seed": 5, "n_envs": N_ENVS, "policy_kwargs": {"net_arch": [16]}}
    model, recorded, actions, states = record_learn("PPO", env_id, limit, steps, params,
                                                    lambda env: VecNormalize(env, gamma=0.99))
    filters = Filters(normalize_observations=True, normalize_rewards=True)
    learner = replay("PPO", env_id, steps, params, recorded, actions, states, filters)
    same_statistics(model.get_vec_normalize_env(), learner.algorithm.filtering)
    learner = ppo(2, 8, filters=filters)
    try:  # the rollout keeps what the policy saw: the observations normalised as of the version acted with
        algorithm = learner.algorithm
        learner.begin_uploads(1, 1).result(30)
        experience = random_experience(np.random.default_rng(7), 8, 1, 0)
        experience = Experience.of(experience.obs * 5 + 3, experience.sample, experience.reward,
                                   experience.terminated, experience.truncated, experience.final_obs, 0)
        learner.learn_experience(1, experience).result(30)
        prior = algorithm.version_filtering
        assert np.allclose(algorithm.buffer.observations[:, 0], prior.normalize_obs(experience.obs[:8, 0]))
        assert prior.observations[None].count == pytest.approx(1e-4)  # version 0's: SB3's prior
        assert algorithm.filtering.observations[None].count == pytest.approx(9 + 1e-4)  # rows 0-8 counted
    finally:
        learner.close()


def ppo(n_envs: int, n_steps: int, env_id: str = "CartPole-v1", filters: Filters | None = None, **more):
    observation_space, action_space = spaces_of(env_id)
    params = {"n_steps": n_steps, "batch_size": n_steps * n_envs, "n_epochs": 1, "seed": 3, "n_envs": n_envs,
              "policy_kwargs": {"net_arch": [8]}, **more}
    learner = build_learner("PPO", "uploads", observation_space, action_space, params, 10_000, filters)
    learner.start()
    return learner


def random_experience(rng: np.random.Generator, steps: int, n: int, version: int, box: bool = False,
                      obs_size: int = 4) -> Experience:
    """Upload-shaped random data: Gaussian samples beyond the box for ``box``, an end or two of each kind."""
    terminated = np.zeros((steps, n), bool)
    truncated = np.zeros((steps, n), bool)
    terminated[1 % steps, 0] = truncated[2 % steps, n - 1] = True
    finals = [[rng.normal(size=obs_size).astype(np.float32) if terminated[t, i] or truncated[t, i] else None
               for i in range(n)] for t in range(steps)]
    sample = rng.normal(scale=2.0, size=(steps, n, 1)).astype(np.float32) if box else rng.integers(0, 2, (steps, n))
    return Experience.of(rng.normal(size=(steps + 1, n, obs_size)).astype(np.float32), sample,
                         rng.normal(size=(steps, n)), terminated, truncated, finals, version)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_the_server_log_probs_of_uploaded_samples_are_sb3_evaluate_actions(env_id):
    learner = ppo(2, 8, env_id)
    try:
        box = env_id == "Pendulum-v1"
        experience = random_experience(np.random.default_rng(0), 8, 1, 0, box, 3 if box else 4)
        assert learner.begin_uploads(7, 1).result(30).steps == 8
        reply = learner.learn_experience(7, experience).result(30)
        assert (reply.policy_version, reply.steps, reply.accepted) == (0, 8, 8)  # the other segment is free
        buffer = learner.algorithm.buffer
        policy = learner.model.policy
        obs = th.as_tensor(experience.obs[:8, 0])
        actions = th.as_tensor(experience.sample[:, 0].reshape(8, -1), dtype=th.float32)
        with th.no_grad():
            values, log_probs, _ = policy.evaluate_actions(obs, actions.long().flatten() if not box else actions)
            last = policy.predict_values(th.as_tensor(experience.obs[8, 0])[None])
        assert np.allclose(buffer.log_probs[:, 0], log_probs.numpy(), rtol=1e-6, atol=1e-6)
        assert np.allclose(buffer.values[:, 0], values.flatten().numpy(), rtol=1e-6, atol=1e-6)
        assert np.array_equal(buffer.actions[:, 0].reshape(-1), experience.sample[:, 0].reshape(-1))  # unclipped
        with th.no_grad():
            final = policy.predict_values(th.as_tensor(experience.final_obs[2][0])[None])
        expected = experience.reward[:, 0].astype(np.float32)  # a terminated end (t 1) is not bootstrapped,
        expected[2] += np.float32(learner.model.gamma) * float(final)  # a time limit (t 2) is
        assert np.allclose(buffer.rewards[:, 0], expected, rtol=1e-6, atol=1e-6)
        assert learner.algorithm.segments.last_values[0] == pytest.approx(float(last), rel=1e-6, abs=1e-6)  # the segment is full
        assert list(buffer.episode_starts[:, 0]) == [1, 0, 1, 1, 0, 0, 0, 0]
    finally:
        learner.close()


def test_an_upload_of_more_envs_than_free_segments_is_written_column_by_column():
    learner = ppo(3, 16)
    try:
        algorithm, buffer = learner.algorithm, learner.algorithm.buffer
        env = gym.make("CartPole-v1")
        obs, _ = env.reset(seed=0)
        learner.begin_episode(2, obs, ActMode.EXPLORE).result(30)  # a server-acting actor holds segment 0
        reply = learner.begin_uploads(1, 3).result(30)
        assert reply.steps == 11  # 32 free rows for 3 envs, rounded up: one row is not learned
        experience = random_experience(np.random.default_rng(6), 11, 3, 0)  # ends: terminated [1][0], cut [2][2]
        future = learner.learn_experience(1, experience)
        while list(algorithm.segments.position) == [0, 0, 0]:
            time.sleep(0.01)
        time.sleep(0.1)
        assert not future.done(), "no row is free for its next upload until the update"
        assert list(algorithm.segments.position) == [0, 16, 16] and algorithm.unlearned_steps == 1 and learner.steps == 32
        values = buffer.values
        gamma = np.float32(learner.model.gamma)
        # env 0: rows 0-10 of segment 1, cut at row 10 (bootstrapped with the value of obs[11][0])
        assert np.allclose(buffer.observations[:11, 1], experience.obs[:11, 0])
        with th.no_grad():
            next_value = float(learner.model.policy.predict_values(th.as_tensor(experience.obs[11, 0])[None]))
        assert buffer.rewards[10, 1] == pytest.approx(np.float32(experience.reward[10, 0]) + gamma * next_value,
                                                      rel=1e-5)
        # env 1: rows 0-4 end segment 1 (its last value: obs[5][1]'s), rows 5-10 start segment 2
        assert np.allclose(buffer.observations[11:, 1], experience.obs[:5, 1])
        assert buffer.episode_starts[11, 1] == 1 and buffer.episode_starts[0, 2] == 1
        assert algorithm.segments.last_values[1] == pytest.approx(float(values[0, 2]), rel=1e-5)
        assert np.allclose(buffer.observations[:6, 2], experience.obs[5:11, 1])
        # env 2: rows 0-9 fill segment 2 (a time limit at row 2 bootstrapped from its final_obs), row 10 is left out
        assert np.allclose(buffer.observations[6:, 2], experience.obs[:10, 2])
        assert buffer.episode_starts[6, 2] == 1 and buffer.episode_starts[9, 2] == 1
        assert algorithm.version == 0  # the server-acting actor's segment is still open
    finally:
        learner.close()


def test_a_session_that_vanishes_frees_its_reserved_segments():
    learner = ppo(2, 8)
    try:
        assert learner.begin_uploads(1, 2).result(30).steps == 8  # both segments reserved
        obs, _ = gym.make("CartPole-v1").reset(seed=0)
        waiting = learner.begin_episode(2, obs, ActMode.EXPLORE)
        time.sleep(0.2)
        assert not waiting.done(), "a server-acting actor waits while an upload holds every segment"
        learner.end_actor(1)  # the session expired
        waiting.result(30)
        assert learner.algorithm.segments.owner == [2, None]
    finally:
        learner.close()


def test_a_vanished_sessions_reservation_is_handed_over_and_its_late_upload_follows_the_stale_rule():
    """A client-acting session that reserved every segment and went silent does not stall another one until it
    expires: after `reservation_timeout` its rows are handed over; its late upload is then refused as stale
    once the others' rollout updated the policy, and learned (rows reserved then) while its version is
    current."""
    learner = ppo(2, 8)
    learner.algorithm.reservation_timeout = 0.5
    rng = np.random.default_rng(7)
    try:
        assert learner.begin_uploads(1, 2).result(30).steps == 8  # both segments reserved, then silence
        opening = learner.begin_uploads(2, 2)  # held: no row is free
        time.sleep(0.2)
        assert not opening.done()
        assert opening.result(30).steps == 8  # handed over by the learner's housekeeping, session 1 still open
        assert learner.algorithm.uploads.lapsed == {1}
        learned = learner.learn_experience(2, random_experience(rng, 8, 2, 0)).result(30)
        assert learned.policy_version == 1 and learner.steps == 16  # session 2's rollout updated the policy
        with pytest.raises(StalePolicy) as refused:  # session 1 comes back with its version-0 block
            learner.learn_experience(1, random_experience(rng, 8, 2, 0)).result(30)
        assert refused.value.policy_version == 1 and learner.steps == 16
        with pytest.raises(StalePolicy, match="none is free now"):  # session 2 reserved every row again
            learner.learn_experience(1, random_experience(rng, 8, 2, 1)).result(30)
        learner.end_actor(2)
        again = learner.learn_experience(1, random_experience(rng, 8, 2, 1)).result(30)  # collected anew
        assert again.accepted == 16 and learner.steps == 32 and not learner.algorithm.uploads.lapsed
    finally:
        learner.close()


def test_a_session_that_never_uploaded_hands_its_rows_over_sooner_than_one_between_blocks():
    """Issue 48, L10: a client-acting session that crashed right after its login held every segment for the
    whole `reservation_timeout` (60 s), refusing other sessions' openings (503) and learning meanwhile. Its first
    block's rows lapse after `first_block_timeout`; a session that has uploaded keeps the longer time."""
    learner = ppo(2, 8)
    learner.algorithm.reservation_timeout = 30.0
    learner.algorithm.first_block_timeout = 0.3
    rng = np.random.default_rng(5)
    try:
        assert learner.begin_uploads(1, 2).result(30).steps == 8  # both segments reserved, then the crash
        assert learner.begin_uploads(2, 2).result(30).steps == 8  # handed over after 0.3 s, not 30
        assert learner.algorithm.uploads.lapsed == {1}
        learner.end_actor(1)
        learner.learn_experience(2, random_experience(rng, 8, 2, 0)).result(30)  # session 2 uploads a block
        opening = learner.begin_uploads(3, 2)  # every row is session 2's again, for its next block
        time.sleep(1.0)
        assert not opening.done()  # a session between blocks keeps its rows for reservation_timeout
        learner.end_actor(2)
        assert opening.result(30).steps == 8
    finally:
        learner.close()


def test_an_upload_of_a_session_the_learner_never_saw_open_is_learned_while_its_version_is_current():
    """A learner restarted from its checkpoint (a lost Ray actor) knows no reservation of the sessions already
    open: their next upload of the current version is written down rows reserved then."""
    learner = ppo(2, 8)
    try:
        reply = learner.learn_experience(9, random_experience(np.random.default_rng(3), 8, 2, 0)).result(30)
        assert (reply.accepted, reply.policy_version, learner.steps) == (16, 1, 16)
    finally:
        learner.close()


def test_masked_log_probs_are_maskableppo_evaluate_actions_under_the_masks():
    observation_space, action_space = spaces.Box(-1, 1, (4,), np.float32), spaces.Discrete(3)
    params = {"n_steps": 8, "batch_size": 16, "n_epochs": 1, "seed": 3, "n_envs": 2, "policy_kwargs": {"net_arch": [8]}}
    learner = build_learner("MaskablePPO", "masked", observation_space, action_space, params, 1000)
    learner.start()
    try:
        rng = np.random.default_rng(1)
        masks = rng.random((9, 1, 3)) < 0.6
        masks[..., 0] = True
        sample = np.array([[rng.choice(np.flatnonzero(masks[t, 0]))] for t in range(8)])
        experience = Experience.of(rng.normal(size=(9, 1, 4)).astype(np.float32), sample, np.ones((8, 1)),
                                   np.zeros((8, 1)), np.zeros((8, 1)), None, 0, masks)
        learner.begin_uploads(3, 1).result(30)
        learner.learn_experience(3, experience).result(30)
        buffer = learner.algorithm.buffer
        with th.no_grad():
            _, log_probs, _ = learner.model.policy.evaluate_actions(
                th.as_tensor(experience.obs[:8, 0]), th.as_tensor(sample[:, 0]), action_masks=masks[:8, 0])
            _, unmasked, _ = learner.model.policy.evaluate_actions(th.as_tensor(experience.obs[:8, 0]),
                                                                   th.as_tensor(sample[:, 0]))
        assert np.allclose(buffer.log_probs[:, 0], log_probs.numpy(), atol=1e-6)
        assert not np.allclose(log_probs.numpy(), unmasked.numpy(), atol=1e-3)  # the masks matter here
        assert np.array_equal(buffer.action_masks[:, 0].astype(bool), masks[:8, 0])
    finally:
        learner.close()


def test_a_stale_policy_version_is_refused_with_nothing_recorded():
    filters = Filters(normalize_observations=True, normalize_rewards=True)
    learner = ppo(2, 4, filters=filters)
    try:
        algorithm = learner.algorithm
        assert learner.begin_uploads(1, 2).result(30).steps == 4
        rng = np.random.default_rng(2)
        before = (algorithm.filtering.state(), algorithm.segments.position.copy(), learner.steps)
        with pytest.raises(StalePolicy) as refused:
            learner.learn_experience(1, random_experience(rng, 4, 2, version=1)).result(30)
        assert refused.value.policy_version == 0
        assert algorithm.filtering.state() == before[0] and np.array_equal(algorithm.segments.position, before[1])
        assert learner.steps == before[2] == 0
        reply = learner.learn_experience(1, random_experience(rng, 4, 2, version=0)).result(30)
        assert (reply.policy_version, reply.steps, reply.accepted, learner.steps) == (1, 4, 8, 8)  # it trained
        with pytest.raises(StalePolicy) as refused:
            learner.learn_experience(1, random_experience(rng, 4, 2, version=0)).result(30)
        assert refused.value.policy_version == 1 and learner.steps == 8
    finally:
        learner.close()


def dqn(lag: int):
    observation_space, action_space = spaces_of("CartPole-v1")
    params = {"learning_starts": 0, "batch_size": 4, "train_freq": 2, "n_envs": 2, "seed": 1, "max_policy_lag": lag,
              "policy_kwargs": {"net_arch": [8]}}
    learner = build_learner("DQN", "lagging", observation_space, action_space, params, 1000)
    learner.start()
    return learner


def test_off_policy_learns_only_the_current_version_unless_max_policy_lag_allows_older_ones():
    rng = np.random.default_rng(3)
    strict = dqn(0)
    try:
        assert strict.begin_uploads(1, 2).result(30).steps == 2
        reply = strict.learn_experience(1, random_experience(rng, 2, 2, 0)).result(30)
        assert reply.policy_version == 1 and strict.steps == 4  # the reply waits for the training
        with pytest.raises(StalePolicy) as refused:
            strict.learn_experience(1, random_experience(rng, 2, 2, 0)).result(30)
        assert refused.value.policy_version == 1 and strict.steps == 4
    finally:
        strict.close()
    lagging = dqn(1)
    try:
        reply = lagging.learn_experience(1, random_experience(rng, 2, 2, 0)).result(30)
        assert reply.policy_version == 0  # answered before the training it completes
        reply = lagging.learn_experience(1, random_experience(rng, 2, 2, 0)).result(30)  # one behind: taken
        assert lagging.steps == 8
        with pytest.raises(StalePolicy):  # two behind
            lagging.learn_experience(1, random_experience(rng, 2, 2, 0)).result(30)
    finally:
        lagging.close()


def test_a_policy_file_is_built_at_each_new_version_and_served_while_the_learner_is_busy():
    """A session that fetched a phase's file once finds the next version's built when the update ends: its
    fetch is answered at once even while the learner's thread is busy (training at max_policy_lag 1), with
    the file a fresh build of that version gives."""
    rng = np.random.default_rng(4)
    learner = dqn(1)
    try:
        assert learner.behaviour("train", "lagging", "DQN").result(30)[0] == 0
        learner.learn_experience(1, random_experience(rng, 2, 2, 0)).result(30)
        learner.mark().result(30)  # after the training the reply did not wait for
        assert learner.policy_version == 1
        built = learner.algorithm.published_behaviour("train", "lagging", "DQN")  # at the update's end
        fresh: Future = Future()
        learner._queue.put(Control("behaviour", fresh, ("train", "lagging", "DQN")))  # what a fetch built till now
        assert built is not None and built == fresh.result(30) and built[0] == 1
        entered, release = threading.Event(), threading.Event()
        learn_upload = learner.algorithm.learn_upload

        def busy(upload):
            entered.set()
            release.wait(30)
            return learn_upload(upload)

        learner.algorithm.learn_upload = busy
        held = learner.learn_experience(1, random_experience(rng, 2, 2, 1))
        assert entered.wait(30)
        served = learner.behaviour("train", "lagging", "DQN")
        assert served.done() and served.result() == built  # not queued behind the busy thread
        release.set()
        held.result(30)
        learner.mark().result(30)  # its training: version 2, whose file the fetch above asked to be built
        assert learner.policy_version == 2 and learner.algorithm._behaviours["train"][0] == 2
        learner.learn_experience(1, random_experience(rng, 2, 2, 2)).result(30)
        learner.mark().result(30)  # version 3, with no fetch since version 2: not built
        assert learner.policy_version == 3 and learner.algorithm._behaviours["train"][0] == 2
    finally:
        learner.close()


def test_a_rollout_mixing_a_server_acting_actor_and_an_upload_trains():
    learner = ppo(2, 16)
    try:
        algorithm = learner.algorithm
        assert learner.begin_uploads(1, 1).result(30).steps == 16  # the first free segment is the upload's
        env = gym.make("CartPole-v1")
        obs, _ = env.reset(seed=0)
        action = learner.begin_episode(2, obs, ActMode.EXPLORE).result(30)  # the server-acting actor: the other
        reply = learner.learn_experience(1, random_experience(np.random.default_rng(4), 16, 1, 0))
        for _ in range(15):
            obs, reward, terminated, truncated, _ = env.step(int(action))
            if terminated or truncated:
                learner.end_episode(2, float(reward), obs, truncated and not terminated, ActMode.EXPLORE)
                obs, _ = env.reset()
                action = learner.begin_episode(2, obs, ActMode.EXPLORE).result(30)
            else:
                action = learner.step(2, float(reward), obs, ActMode.EXPLORE).result(30)
        time.sleep(0.2)
        assert not reply.done(), "no row is free for the next upload until the update"
        assert algorithm.version == 0 and list(algorithm.segments.position) == [16, 15]
        obs, reward, terminated, truncated, _ = env.step(int(action))
        learner.step(2, float(reward), obs, ActMode.EXPLORE).result(30)
        result = reply.result(30)
        assert (result.policy_version, result.steps, result.accepted) == (1, 16, 16)
        assert learner.steps == 32 and algorithm.version == 1
    finally:
        learner.close()

# -- bad uploads: refused whole, the error naming the field and [t][i] ----------------------------------------
BOX = spaces.Box(-np.inf, np.inf, (2,), np.float32)


def body(**changes):
    data = {"policy_version": 0, "obs": [[[0.0, 1.0], [1.0, 0.0]]] * 4, "sample": [[0, 1]] * 3,
            "reward": [[1.0, 1.0]] * 3, "terminated": [[False, False]] * 3, "truncated": [[False, False]] * 3,
            "final_obs": None}
    data.update(changes)
    return data


def parse(data, sample_space=spaces.Discrete(2), masks=False):
    checks = ExperienceSpaces(BOX, sample_space, spaces.Discrete(2) if masks else None,
                              (lambda value, space, where: check_action_mask(space, value, where)) if masks else None)
    return parse_experience(data, checks, 2, 3)


def test_a_good_upload_is_parsed_into_columns():
    ended = [[False, False], [False, True], [False, False]]
    experience = parse(body(truncated=ended, final_obs=[[None, None], [None, [5.0, 5.0]], [None, None]]))
    assert experience.obs.shape == (4, 2, 2) and experience.sample.shape == (3, 2) and experience.steps == 3
    assert experience.time_limits[1, 1] and experience.finals()[0][:2] == (1, 1)


@pytest.mark.parametrize("changes, where", [
    ({"sample": [[0, 1]] * 2}, "'sample' has 2 rows; expected 3"),
    ({"obs": [[[0.0, 1.0], [1.0, 0.0]]] * 3}, "'obs' has 3 rows; expected 4"),
    ({"reward": [[1.0, 1.0], [1.0], [1.0, 1.0]]}, "reward[1] must be a list of 2 items"),
    ({"obs": [[[0.0, 1.0], [1.0, 0.0]]] * 2 + [[[0.0, 1.0], [1.0, 0.0, 2.0]]] + [[[0.0, 1.0], [1.0, 0.0]]]},
     "obs[2][1] has shape [3]"),
    ({"reward": [[1.0, 1.0], [float("inf"), 1.0], [1.0, 1.0]]}, "reward[1][0] must be a finite number"),
    ({"obs": [[[0.0, 1.0], [1.0, 0.0]]] * 3 + [[[0.0, 1e39], [1.0, 0.0]]]}, "obs[3][0] contains NaN or infinity"),
    ({"sample": [[0, 1], [0, 2], [0, 1]]}, "sample[1][1] is 2, outside [0, 1]"),
    ({"sample": [[0, 1], [0, True], [0, 1]]}, "sample[1][1] must be an integer"),
    ({"terminated": [[False, False], [False, False], [0.5, False]]}, "terminated[2][0] must be true or false"),
    ({"final_obs": [[None, [1.0, 1.0]], [None, None], [None, None]]}, "final_obs[0][1] is given but env 1 did not end"),
    ({"terminated": [[False, False], [False, False], [True, False]]}, "final_obs[2][0] is missing"),
    ({"policy_version": "3"}, "'policy_version'"),
    ({"action_mask": [[[True, True]] * 2] * 4}, "takes no action masks"),
])
def test_bad_uploads_are_refused_naming_the_field_and_where(changes, where):
    with pytest.raises(BadExperience) as refused:
        parse(body(**changes))
    assert where in str(refused.value)


def test_a_sample_outside_the_bounded_support_or_forbidden_by_its_mask_is_refused():
    bounded = spaces.Box(-1.0, 1.0, (1,), np.float32)
    with pytest.raises(BadExperience, match=r"sample\[2\]\[0\] is outside the support"):
        parse(body(sample=[[[0.5], [1.0]], [[-1.0], [0.0]], [[1.5], [0.0]]]), bounded)
    masks = [[[True, True], [True, True]], [[True, False], [True, True]], [[True, True]] * 2, [[True, True]] * 2]
    with pytest.raises(BadExperience, match=r"sample\[1\]\[0\] is an action that action_mask\[1\]\[0\] forbids"):
        parse(body(sample=[[0, 1], [1, 1], [0, 1]], action_mask=masks), masks=True)
    with pytest.raises(BadExperience, match=r"action_mask\[3\]\[1\]"):
        parse(body(action_mask=masks[:3] + [[[True, True], [False, False]]]), masks=True)


def test_an_upload_of_other_steps_than_the_learner_asked_is_refused():
    learner = ppo(2, 4)
    try:
        assert learner.begin_uploads(1, 2).result(30).steps == 4
        with pytest.raises(BadExperience, match="'sample' has 3 rows of 2; 4 steps of 2 envs were asked"):
            learner.learn_experience(1, random_experience(np.random.default_rng(5), 3, 2, 0)).result(30)
        assert learner.steps == 0
    finally:
        learner.close()


@pytest.mark.parametrize("algorithm, filters, says", [
    ("RecurrentPPO", None, "LSTM state"),
    ("PPO", Filters(frame_stack=2), "frame_stack"),
])
def test_an_agent_whose_policy_cannot_act_at_the_client_refuses_its_sessions(algorithm, filters, says):
    observation_space, action_space = spaces_of("CartPole-v1")
    params = {"n_steps": 8, "batch_size": 8, "policy_kwargs": {"net_arch": [8]}}
    learner = build_learner(algorithm, "refusing", observation_space, action_space, params, 100, filters)
    learner.start()
    try:
        with pytest.raises(NotClientActing, match=says):
            learner.begin_uploads(1, 1)
    finally:
        learner.close()


if "PixelDotRGB-v0" not in gym.registry:  # three channels: a transpose is not a reshape
    gym.register("PixelDotRGB-v0", entry_point="shepherd.envs.pixels:PixelDotEnv", kwargs={"channels": 3})

IMAGE_CASES = {  # a 36x36 picture (NatureCNN's smallest), uploaded channels last: SB3 learns it transposed
    "PPO": ("PixelDotRGB-v0", 20, 128, {"n_steps": 16, "batch_size": 32, "n_epochs": 2}),
    "DQN": ("PixelDotRGB-v0", 12, 96, {"learning_starts": 20, "batch_size": 8, "buffer_size": 500,
                                             "train_freq": 4, "target_update_interval": 20}),
}


@pytest.mark.parametrize("algorithm", list(IMAGE_CASES))
def test_a_client_uploading_images_ends_with_sb3_learns_weights(algorithm):
    env_id, limit, steps, params = IMAGE_CASES[algorithm]
    params = {**params, "seed": 5, "n_envs": N_ENVS, "policy_kwargs": {"net_arch": [16]}}
    model, recorded, actions, states = record_learn(algorithm, env_id, limit, steps, params)
    assert recorded.obs[0].shape == (N_ENVS, 36, 36, 3) and model.observation_space.shape == (3, 36, 36)
    expected = model.policy.state_dict()
    got = replay(algorithm, env_id, steps, params, recorded, actions, states).model.policy.state_dict()
    for name in expected:
        assert th.allclose(expected[name], got[name], rtol=1e-4, atol=1e-5), f"{algorithm}: {name} differs"
