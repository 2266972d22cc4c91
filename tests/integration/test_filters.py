"""The agent's filters (shepherd/agents/filters.py): VecNormalize's and VecFrameStack's semantics, pooled over
clients, frozen in evaluation, kept in the checkpoint, applied by the greedy snapshot."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from stable_baselines3.common.vec_env import VecFrameStack, VecNormalize

from shepherd.agents import ActMode, build_learner
from shepherd.agents.filters import RunningMeanStd
from shepherd.definition import AgentDefinition, Filters
from shepherd.wire.spaces import parse_space
from tests.integration.test_sb3_equivalence import sb3_weights, shepherd_vector_weights

BOTH = Filters(normalize_observations=True, normalize_rewards=True)

FILTER_CASES = {  # SB3's learn() under VecNormalize / VecFrameStack against one vector session with the filters
    "PPO-normalize": ("PPO", "CartPole-v1", 4, 512, {"n_steps": 64, "batch_size": 64, "n_epochs": 2}, BOTH,
                      lambda env: VecNormalize(env, gamma=0.99)),
    "SAC-normalize": ("SAC", "Pendulum-v1", 2, 300, {"learning_starts": 100, "batch_size": 16, "train_freq": 2}, BOTH,
                      lambda env: VecNormalize(env, gamma=0.99)),
    "DQN-normalize-observations": ("DQN", "CartPole-v1", 4, 320, {
        "learning_starts": 100, "batch_size": 16, "train_freq": 4, "gradient_steps": 2, "target_update_interval": 50,
        "exploration_fraction": 0.5}, Filters(normalize_observations=True),
        lambda env: VecNormalize(env, norm_reward=False, gamma=0.99)),
    "PPO-normalize-stack": ("PPO", "CartPole-v1", 4, 512, {"n_steps": 64, "batch_size": 64, "n_epochs": 2},
                            Filters(normalize_observations=True, normalize_rewards=True, frame_stack=3),
                            lambda env: VecFrameStack(VecNormalize(env, gamma=0.99), 3)),
}


@pytest.mark.parametrize("case", list(FILTER_CASES))
def test_filters_learn_exactly_as_sb3_learn_under_vecnormalize(case):
    algorithm, env_id, n_envs, steps, params, filters, wrap = FILTER_CASES[case]
    params = {**params, "seed": 5, "n_envs": n_envs, "policy_kwargs": {"net_arch": [16]}}
    expected = sb3_weights(algorithm, env_id, steps, params, n_envs, wrap=wrap)
    got = shepherd_vector_weights(algorithm, env_id, n_envs, steps, params, filters)
    unfiltered = shepherd_vector_weights(algorithm, env_id, n_envs, steps, params)
    assert expected.keys() == got.keys()
    for name in expected:
        assert th.allclose(expected[name], got[name], rtol=1e-4, atol=1e-5), f"{case}: {name} differs"
    assert any(expected[n].shape != unfiltered[n].shape
               or not th.allclose(expected[n], unfiltered[n], rtol=1e-4, atol=1e-5) for n in expected), \
        "the filters changed nothing: the case proves nothing"


PIXELS = {"n_steps": 16, "batch_size": 32, "n_epochs": 2}

IMAGE_FILTER_CASES = {  # images: stacked along their channels (then SB3 transposes them), never normalised
    "channels last, 4 frames": ({}, Filters(frame_stack=4), lambda env: VecFrameStack(env, 4)),
    "channels first, 3 frames": ({"channels_first": True}, Filters(frame_stack=3), lambda env: VecFrameStack(env, 3)),
    "a Dict's image left out of normalisation": (
        {"dict_obs": True}, BOTH, lambda env: VecNormalize(env, gamma=0.99, norm_obs_keys=["step"])),
}


@pytest.mark.parametrize("case", list(IMAGE_FILTER_CASES))
def test_image_filters_learn_exactly_as_sb3_learn_under_vecframestack_and_vecnormalize(case):
    env_kwargs, filters, wrap = IMAGE_FILTER_CASES[case]
    params = {**PIXELS, "seed": 5, "n_envs": 2, "policy_kwargs": {"net_arch": [16]}}
    env_id = "shepherd/PixelDot-v0"
    expected = sb3_weights("PPO", env_id, 64, params, 2, wrap=wrap, env_kwargs=env_kwargs)
    got = shepherd_vector_weights("PPO", env_id, 2, 64, params, filters, env_kwargs=env_kwargs)
    unfiltered = shepherd_vector_weights("PPO", env_id, 2, 64, params, env_kwargs=env_kwargs)
    assert expected.keys() == got.keys()
    for name in expected:
        assert th.allclose(expected[name], got[name], rtol=1e-4, atol=1e-5), f"{case}: {name} differs"
    assert any(expected[n].shape != unfiltered[n].shape
               or not th.allclose(expected[n], unfiltered[n], rtol=1e-4, atol=1e-5) for n in expected), \
        "the filters changed nothing: the case proves nothing"


def drive(learner, episodes: list[list[np.ndarray]], actors: int, mode=ActMode.EXPLORE) -> None:
    """Actor i plays episodes[i::actors], waiting for each action as a client does; reward 1 a step."""
    for actor in range(actors):
        for episode in episodes[actor::actors]:
            learner.begin_episode(actor + 1, episode[0], mode).result(30)
            for obs in episode[1:-1]:
                learner.step(actor + 1, 1.0, obs, mode).result(30)
            learner.end_episode(actor + 1, 1.0, episode[-1], False, mode)
    learner.begin_episode(99, episodes[0][0], ActMode.GREEDY).result(30)  # a round trip: all is filtered


def pooled_learner(filters=BOTH):
    return build_learner("PPO", "pooled", parse_space([[3], "-inf", "inf"]), parse_space(2),
                         {"n_steps": 16, "n_envs": 4, "seed": 1}, None, filters)


def test_statistics_pooled_from_four_clients_equal_the_concatenated_stream_and_evaluation_leaves_them():
    rng = np.random.default_rng(0)
    episodes = [[rng.normal([5.0, -3.0, 100.0], [1.0, 0.1, 30.0]).astype(np.float32) for _ in range(rng.integers(3, 12))]
                for _ in range(40)]
    learner = pooled_learner()
    learner.start()
    try:
        drive(learner, episodes, actors=4)
        stats = learner.algorithm.filtering.observations[None]
        counted = np.stack([obs for episode in episodes for obs in episode[:-1]])  # an episode's END does not count
        expected = RunningMeanStd((3,))
        expected.update(counted)
        assert np.max(np.abs(stats.mean - expected.mean) / np.abs(expected.mean)) <= 1e-9
        assert np.max(np.abs(stats.var - expected.var) / expected.var) <= 1e-9
        assert stats.count == pytest.approx(expected.count, rel=1e-12)
        returns = learner.algorithm.filtering.returns
        discounted = [sum(0.99 ** k for k in range(t + 1)) for episode in episodes for t in range(len(episode) - 1)]
        assert returns.mean == pytest.approx(np.mean(discounted) * len(discounted) / (len(discounted) + 1e-4), rel=1e-9)
        before = (stats.mean.copy(), stats.var.copy(), returns.var.copy())
        drive(learner, episodes[:8], actors=2, mode=ActMode.GREEDY)
        assert np.array_equal(stats.mean, before[0]) and np.array_equal(stats.var, before[1])
        assert np.array_equal(returns.var, before[2])
    finally:
        learner.close()


def test_statistics_survive_a_checkpoint_and_restore(tmp_path):
    rng = np.random.default_rng(1)
    episodes = [[rng.normal(7.0, 2.0, 3).astype(np.float32) for _ in range(6)] for _ in range(10)]
    learner = pooled_learner()
    learner.start()
    try:
        drive(learner, episodes, actors=2)
        learner.checkpoint(tmp_path / "model.zip", {}).result(30)
        saved = learner.algorithm.filtering.state()
    finally:
        learner.close()
    restored = pooled_learner()
    restored.restore(tmp_path / "model.zip")
    assert restored.algorithm.filtering.state() == saved
    assert saved["observations"][""]["mean"][0] == pytest.approx(7.0, abs=1.0)


def test_a_restored_version_normalises_with_the_statistics_its_files_were_built_with(tmp_path):
    """A version's files normalise with the statistics of when it was made (`version_filtering`); the running
    ones move on until the next update. A restore gave the version the checkpoint's running statistics: a file
    fetched before the restart (same version) was then evaluated, its uploads learned, under another
    normalisation (log-probabilities off by up to 2 nats)."""
    rng = np.random.default_rng(1)
    learner = pooled_learner()
    learner.start()
    try:
        version, _ = learner.behaviour("train", "pooled", "PPO").result(30)  # a client fetches the file
        made_with = learner.algorithm.version_filtering.state()
        drive(learner, [[rng.normal(50.0, 5.0, 3).astype(np.float32) for _ in range(6)]], actors=1)
        assert learner.algorithm.version == version  # no update: the same version, statistics moved
        learner.checkpoint(tmp_path / "model.zip", {}).result(30)
        running = learner.algorithm.filtering.state()
    finally:
        learner.close()
    assert running != made_with
    restored = pooled_learner()
    restored.restore(tmp_path / "model.zip")
    assert restored.algorithm.version == version
    assert restored.algorithm.version_filtering.state() == made_with
    assert restored.algorithm.filtering.state() == running


def test_the_greedy_snapshot_normalises_as_the_learner_does():
    rng = np.random.default_rng(2)
    episodes = [[rng.normal([50.0, -20.0, 3.0], 5.0).astype(np.float32) for _ in range(6)] for _ in range(10)]
    learner = pooled_learner(Filters(normalize_observations=True))
    assert learner.greedy is not None
    learner.start()
    try:
        drive(learner, episodes, actors=2)
        learner.greedy.prepare()
        learner.begin_episode(98, episodes[0][0], ActMode.GREEDY).result(30)  # the learner publishes
        probes = [rng.normal([50.0, -20.0, 3.0], 5.0).astype(np.float32) for _ in range(200)]
        snapshot, _ = learner.greedy.act_batch(probes)
        answered = [learner.begin_episode(200 + i, obs, ActMode.GREEDY) for i, obs in enumerate(probes)]
        # the learner answers these (a BEGIN of a greedy episode goes to the learner first)
        assert [int(a) for a in snapshot] == [int(f.result(30)) for f in answered]
        raw = learner.greedy.network.bind(learner.algorithm.latest_weights().arrays)(np.stack(probes), None)
        assert not np.array_equal(np.asarray(raw).ravel(), np.asarray(snapshot).ravel()), "normalising mattered"
    finally:
        learner.close()


def test_a_frozen_greedy_snapshot_keeps_its_weights_and_statistics_as_the_learner_goes_on():
    """`GreedyPolicy.frozen` (what a trial plays): the policy as published, and the observation statistics
    as they were, whatever the learner learns and counts afterwards."""
    rng = np.random.default_rng(3)
    episodes = [[rng.normal([50.0, -20.0, 3.0], 5.0).astype(np.float32) for _ in range(6)] for _ in range(10)]
    learner = pooled_learner(Filters(normalize_observations=True))
    learner.start()
    try:
        drive(learner, episodes, actors=2)
        learner.greedy.prepare()
        learner.begin_episode(98, episodes[0][0], ActMode.GREEDY).result(30)  # the learner publishes
        frozen = learner.greedy.frozen()
        assert frozen is not None
        probes = [rng.normal([50.0, -20.0, 3.0], 5.0).astype(np.float32) for _ in range(200)]
        before, version = frozen.act_batch(probes)
        moments = learner.algorithm.filtering.observations[None].moments
        shifted = [[obs + 40.0 for obs in episode] for episode in episodes]
        drive(learner, shifted * 3, actors=2)  # updates, and statistics of observations far from the first
        assert learner.algorithm.version > version
        assert not np.array_equal(learner.algorithm.filtering.observations[None].moments[0], moments[0])
        after, still = frozen.act_batch(probes)
        assert still == version and np.array_equal(np.asarray(before), np.asarray(after))
        assert np.array_equal(frozen.filtering.observations[None].moments[0], moments[0])
    finally:
        learner.close()


def test_off_policy_replay_keeps_what_clients_sent():
    rng = np.random.default_rng(3)
    episodes = [[rng.normal(40.0, 3.0, 3).astype(np.float32) for _ in range(6)] for _ in range(6)]
    learner = build_learner("DQN", "replay", parse_space([[3], "-inf", "inf"]), parse_space(2),
                            {"learning_starts": 1000, "seed": 1}, None, BOTH)
    learner.start()
    try:
        drive(learner, episodes, actors=1)
        stored = learner.model.replay_buffer.observations[:5, 0]
        assert np.allclose(stored, np.stack(episodes[0][:5]))  # raw, not normalised
        assert np.allclose(learner.model.replay_buffer.rewards[:5, 0], 1.0)
        sampled = learner.model.replay_buffer.sample(8, env=learner.model._vec_normalize_env)
        assert float(sampled.observations.abs().mean()) < 5.0  # normalised when sampled
    finally:
        learner.close()


def test_frame_stacking_shows_the_policy_the_last_frames():
    learner = build_learner("PPO", "stacked", parse_space([[2], "-inf", "inf"]), parse_space(2),
                            {"n_steps": 8, "batch_size": 8, "seed": 1}, None, Filters(frame_stack=3))
    assert learner.model.observation_space.shape == (6,) and learner.greedy is None
    learner.start()
    try:
        frames = [np.array([i, -i], np.float32) for i in range(1, 5)]
        learner.begin_episode(1, frames[0], ActMode.EXPLORE).result(30)
        for frame in frames[1:]:
            learner.step(1, 0.0, frame, ActMode.EXPLORE).result(30)
        rows = learner.algorithm.buffer.observations[:4, 0]
        assert rows[0].tolist() == [0, 0, 0, 0, 1, -1]
        assert rows[3].tolist() == [2, -2, 3, -3, 4, -4]
    finally:
        learner.close()


@pytest.mark.parametrize("filters, observation_space, algorithm, says", [
    ({"normalize_observations": True}, 5, "PPO", "needs Box observations"),
    ({"frame_stack": 2}, {"a": [[2], 0, 1]}, "PPO", "frame_stack needs Box"),
    ({"frame_stack": 2, "normalize_observations": True}, [[2], 0, 1], "DQN", "refused for off-policy"),
    ({"normalize_observations": True}, ["Image", [36, 36, 3]], "PPO", "does not apply to images"),
    ({"normalize_observations": True}, {"eye": ["Image", [36, 36, 3]]}, "PPO", "needs Box observations"),
    ({"frame_stack": 16}, ["Image", [36, 12, 1]], "PPO", "16 channels .* more than its 12 rows or columns"),
])
def test_filters_a_space_or_family_cannot_take_are_refused(filters, observation_space, algorithm, says):
    from shepherd.agents import ParameterError, check_agent

    with pytest.raises(ParameterError, match=says):
        check_agent(AgentDefinition("x", algorithm, observation_space, 2, filters=filters))


def test_images_are_refused_by_an_algorithm_without_an_image_policy_and_as_actions():
    from shepherd.agents import ParameterError, check_agent

    with pytest.raises(ParameterError, match="CrossQ has no policy for image observations; .* SAC"):
        check_agent(AgentDefinition("x", "CrossQ", ["Image", [36, 36, 1]], [[1], -1, 1]))
    with pytest.raises(ParameterError, match="an image is an observation space, not an action space"):
        check_agent(AgentDefinition("x", "SAC", [[2], -1, 1], ["Image", [36, 36, 1]]))


def test_bad_filter_fields_get_one_line():
    with pytest.raises(ValueError, match="filters has no 'normalise'"):
        Filters.parse({"normalise": True})
    with pytest.raises(ValueError, match="clip_observations must be a positive number"):
        Filters.parse({"clip_observations": -1})


def test_a_preset_override_sets_one_filter_and_a_misspelt_one_is_named(capsys):
    from shepherd.cli.main import main

    assert main(["check", "cartpole_ppo_yaml", "-cp", "agents.cartpole.filters.normalize_observations=true"]) == 0
    assert "filters: normalize_observations=true" in capsys.readouterr().out
    assert main(["check", "cartpole_ppo_yaml", "-cp", "agents.cartpole.filters.normalise=true"]) == 2
    assert "unknown key 'normalise' in agents.cartpole.filters" in capsys.readouterr().err
