"""The Actor-Advisor's mixed policy (agents/sb3/mixing.py) against a direct computation: probabilities,
log-probabilities, the Gaussian product, a uniform advisor, and training through the stored advice."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.distributions import CategoricalDistribution, DiagGaussianDistribution
from stable_baselines3.common.vec_env import DummyVecEnv

from shepherd.agents.sb3.mixing import AdvisedRolloutBuffer, Mixer, advice_rows, mix
from shepherd.agents.sb3.base import SpacesEnv


def _categorical(logits: np.ndarray) -> CategoricalDistribution:
    return CategoricalDistribution(logits.shape[1]).proba_distribution(th.as_tensor(logits, dtype=th.float32))


def _gaussian(mean: np.ndarray, log_std: np.ndarray) -> DiagGaussianDistribution:
    distribution = DiagGaussianDistribution(mean.shape[1])
    return distribution.proba_distribution(th.as_tensor(mean, dtype=th.float32), th.as_tensor(log_std, dtype=th.float32))


@pytest.mark.parametrize("strength", [0.5, 1.0, 2.0])
def test_discrete_mixed_policy_is_the_normalised_product(strength: float) -> None:
    rng = np.random.default_rng(0)
    own_logits, advisor_logits = rng.normal(size=(5, 4)), rng.normal(size=(5, 4)) * 3
    own = np.exp(own_logits) / np.exp(own_logits).sum(1, keepdims=True)
    advisor = np.exp(advisor_logits) / np.exp(advisor_logits).sum(1, keepdims=True)
    expected = own * advisor ** strength
    expected /= expected.sum(1, keepdims=True)

    mixed = mix(_categorical(own_logits), advice_rows(_categorical(advisor_logits), strength))

    np.testing.assert_allclose(mixed.distribution.probs.numpy(), expected, rtol=1e-5)
    actions = th.as_tensor([0, 1, 2, 3, 1])
    np.testing.assert_allclose(mixed.log_prob(actions).numpy(), np.log(expected[np.arange(5), actions.numpy()]),
                               rtol=1e-5)
    assert not np.allclose(expected, own)  # the advice did something


def test_a_uniform_advisor_changes_nothing() -> None:
    rng = np.random.default_rng(1)
    own_logits = rng.normal(size=(3, 5))
    own = _categorical(own_logits).distribution.probs.numpy()
    uniform = advice_rows(_categorical(np.zeros((3, 5))), strength=3.0)
    mixed = mix(_categorical(own_logits), uniform)
    np.testing.assert_allclose(mixed.distribution.probs.numpy(), own, rtol=1e-6)
    np.testing.assert_allclose(mixed.entropy().numpy(), _categorical(own_logits).entropy().numpy(), rtol=1e-6)


@pytest.mark.parametrize("strength", [0.5, 1.0, 3.0])
def test_gaussian_mixed_policy_is_the_product_of_gaussians(strength: float) -> None:
    mean, log_std = np.array([[0.3, -1.0]]), np.array([[-0.2, 0.4]])
    advisor_mean, advisor_log_std = np.array([[1.5, 0.5]]), np.array([[-0.7, 0.0]])
    mixed = mix(_gaussian(mean, log_std), advice_rows(_gaussian(advisor_mean, advisor_log_std), strength))
    # the normalised product of the two densities, on a grid, dimension by dimension
    grid = np.linspace(-8, 8, 40001)
    expected_log_prob = 0.0
    point = np.array([0.8, -0.1])
    for d in range(2):
        log_density = (-0.5 * ((grid - mean[0, d]) / np.exp(log_std[0, d])) ** 2
                       + strength * -0.5 * ((grid - advisor_mean[0, d]) / np.exp(advisor_log_std[0, d])) ** 2)
        density = np.exp(log_density - log_density.max())
        density /= np.trapezoid(density, grid)
        np.testing.assert_allclose(mixed.distribution.mean.numpy()[0, d], np.trapezoid(grid * density, grid), atol=1e-4)
        expected_log_prob += np.log(np.interp(point[d], grid, density))
    np.testing.assert_allclose(mixed.log_prob(th.as_tensor(point[None], dtype=th.float32)).numpy()[0], expected_log_prob,
                               atol=1e-4)


def test_zero_advice_leaves_a_gaussian_as_it_is() -> None:
    own = _gaussian(np.array([[0.3]]), np.array([[-0.2]]))
    mixed = mix(_gaussian(np.array([[0.3]]), np.array([[-0.2]])), th.zeros((1, 2)))
    x = th.as_tensor([[0.1]])
    np.testing.assert_allclose(mixed.log_prob(x).numpy(), own.log_prob(x).numpy(), rtol=1e-6)


def test_training_evaluates_each_minibatch_under_its_stored_advice() -> None:
    """PPO's evaluate_actions, fed by the advised buffer, uses each row's advice: the log-probabilities of
    the stored actions are those of the mixed policy, row by row."""
    observation_space, action_space = spaces.Box(-1, 1, (3,)), spaces.Discrete(3)
    env = DummyVecEnv([lambda: SpacesEnv(observation_space, action_space)])
    model = PPO("MlpPolicy", env, n_steps=8, batch_size=4, device="cpu",
                rollout_buffer_class=AdvisedRolloutBuffer, rollout_buffer_kwargs={"advice_width": 3})
    mixer = Mixer()
    mixer.install(model.policy)
    buffer = model.rollout_buffer
    assert isinstance(buffer, AdvisedRolloutBuffer)
    buffer.mixer = mixer
    rng = np.random.default_rng(2)
    buffer.observations[:] = rng.uniform(-1, 1, buffer.observations.shape)
    buffer.actions[:] = rng.integers(0, 3, buffer.actions.shape)
    buffer.advice[:] = rng.normal(size=buffer.advice.shape) * 2
    advice = buffer.advice.reshape(-1, 3).copy()
    observations = buffer.observations.reshape(-1, 3).copy()
    actions = buffer.actions.reshape(-1).copy()
    buffer.full = True
    seen = 0
    for batch in buffer.get(4):
        _, log_prob, _ = model.policy.evaluate_actions(batch.observations, batch.actions.long().flatten())
        for i, obs in enumerate(batch.observations.numpy()):
            row = int(np.flatnonzero(np.all(np.isclose(observations, obs), axis=1))[0])
            with th.no_grad():
                logits = model.policy.action_net(model.policy.mlp_extractor.forward_actor(
                    th.as_tensor(obs[None], dtype=th.float32))).numpy()[0]
            mixed = logits + advice[row]
            expected = mixed[int(actions[row])] - np.log(np.exp(mixed).sum())
            assert log_prob[i].item() == pytest.approx(expected, abs=1e-5)
            seen += 1
    assert seen == 8
    assert mixer.rows is None  # the policy is its own again once training is over


@pytest.mark.parametrize("algorithm, action_space, words", [
    ("TD3", [[1], -1, 1], "deterministic"), ("DDPG", [[1], -1, 1], "deterministic"),
    ("DQN", 2, "PPO and A2C"), ("SAC", [[1], -1, 1], "PPO and A2C"),
    ("PPO", ["MultiDiscrete", [2, 3]], "Discrete and Box")])
def test_advised_agents_are_refused_where_advice_is_not_defined(algorithm, action_space, words) -> None:
    from shepherd.agents import ParameterError, check_agent
    from shepherd.definition import AgentDefinition
    with pytest.raises(ParameterError, match=words):
        check_agent(AgentDefinition("a", algorithm, [[3], -1, 1], action_space, {}, sharing="advised"))
    if algorithm != "PPO":
        check_agent(AgentDefinition("a", algorithm, [[3], -1, 1], action_space, {}, sharing="pooled"))


def test_advice_parameters_are_shepherds_not_sb3s() -> None:
    from shepherd.agents import ParameterError, sb3_arguments
    kwargs, _ = sb3_arguments("PPO", spaces.Discrete(2), {"advice_strength": 2.0, "advice_decay": 1000,
                                                           "advice_keep": 8000})
    assert not {"advice_strength", "advice_decay", "advice_keep"} & set(kwargs)
    for name in ("advice_strength", "advice_decay", "advice_keep"):
        with pytest.raises(ParameterError, match=f"'{name}' must be 0 or more"):
            sb3_arguments("PPO", spaces.Discrete(2), {name: -1})


def test_advice_fades_as_the_client_catches_up_with_its_advisor() -> None:
    from pathlib import Path

    from shepherd.agents.advice import Advice, Advisor, catch_up
    assert catch_up(None, 500.0) == 1.0 and catch_up(100.0, None) == 1.0  # not evaluated: full advice
    assert catch_up(0.0, 500.0) == 1.0
    assert catch_up(250.0, 500.0) == pytest.approx(0.5)
    assert catch_up(500.0, 500.0) == 0.0 and catch_up(520.0, 500.0) == 0.0  # caught up: none
    assert catch_up(-300.0, -200.0) == pytest.approx(0.5)  # negative returns: the lead relative to |advisor|
    advice = Advice(strength=2.0, decay_steps=1000)
    advice.advisor = Advisor("best", None, Path("nowhere"), recent_return=400.0)  # type: ignore[arg-type]
    assert advice.strength_at(0) == 2.0  # no evaluation of its own yet
    advice.own_return = 100.0
    assert advice.strength_at(0) == pytest.approx(1.5)
    assert advice.strength_at(500) == pytest.approx(0.75)  # and the decay by steps on top
    assert advice.strength_at(1000) == 0.0
    advice.own_return = 400.0
    assert advice.strength_at(0) == 0.0


@pytest.mark.parametrize("frame_stack", [1, 3])
def test_the_advisor_sees_observations_normalised_by_its_own_filter_statistics(frame_stack: int) -> None:
    """Each client normalises with its own statistics; the advisor's network gets them as its own filters
    would have made them."""
    from shepherd.agents.sb3.advised import advisor_observations
    from shepherd.agents.filters import Filtering, Filters
    space = spaces.Box(-10, 10, (2,))
    filters = Filters(normalize_observations=True, frame_stack=frame_stack)
    own, advisor = Filtering(filters, space, 0.99), Filtering(filters, space, 0.99)
    rng = np.random.default_rng(4)
    own.observations[None].update(rng.normal([1.0, -2.0], [0.5, 3.0], size=(200, 2)))
    advisor.observations[None].update(rng.normal([-1.0, 4.0], [2.0, 0.2], size=(200, 2)))
    raw = rng.normal(size=(5, 2 * frame_stack)) + np.tile([0.0, 1.0], frame_stack)  # five stacks of raw frames

    def normalised(filtering: Filtering) -> np.ndarray:
        return np.concatenate([filtering.normalize_obs(raw[:, 2 * f:2 * f + 2]) for f in range(frame_stack)], axis=1)

    converted = advisor_observations(normalised(own), own, advisor)
    assert np.allclose(converted, normalised(advisor), atol=1e-4)
    assert not np.allclose(normalised(own), normalised(advisor), atol=0.1)  # it did need converting
    assert advisor_observations(raw, None, advisor) is raw  # no filters: as they are
