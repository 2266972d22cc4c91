"""MaskablePPO fed through the pooled on-policy learner learns exactly as its own ``learn()``: the same weights.

The client sends, with each observation, the mask sb3-contrib's ``ActionMasker`` wrapper gives for it (as
MaskablePPO's ``collect_rollouts`` asks ``get_action_masks(env)`` before each step). Masks change the
sampled actions, the stored log-probabilities and the masks ``train()`` evaluates with, so a learner that
drops them anywhere ends with other weights. Over real HTTP with a vector client: tests/e2e/test_mask_exactness.py.
"""

from __future__ import annotations

import gymnasium as gym
import pytest
import numpy as np
import torch as th
from sb3_contrib import MaskablePPO
from sb3_contrib.common.wrappers import ActionMasker

from shepherd.agents import ActMode, Kind, Request, build_learner, sb3_arguments
from shepherd.wire.spaces import parse_space, space_to_json

PARAMS = {"n_steps": 64, "batch_size": 32, "n_epochs": 2, "learning_rate": "lin_0.001", "seed": 3,
          "policy_kwargs": {"net_arch": [16]}}
STEPS = 256


def spin_mask(env: gym.Env) -> np.ndarray:
    """Push only against a fast spin: often one action is masked out, never both."""
    theta_dot = env.unwrapped.state[3]
    return np.array([theta_dot < 0.3, theta_dot > -0.3])


def masked_cartpole() -> gym.Env:
    return ActionMasker(gym.make("CartPole-v1"), spin_mask)


def contrib_weights(steps: int, params: dict, n_envs: int = 1) -> dict[str, th.Tensor]:
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("CartPole-v1", n_envs=n_envs, wrapper_class=ActionMasker,
                       wrapper_kwargs={"action_mask_fn": spin_mask})
    kwargs, _ = sb3_arguments("MaskablePPO", env.action_space, params)
    model = MaskablePPO("MlpPolicy", env, device="cpu", **kwargs)
    model.learn(steps)
    return model.policy.state_dict()


def learner_weights(steps: int, params: dict, masks: bool = True) -> dict[str, th.Tensor]:
    env = masked_cartpole()  # made before the learner: gymnasium's make draws from numpy's global generator
    learner = build_learner("MaskablePPO", "same", parse_space(space_to_json(env.observation_space)),
                            parse_space(space_to_json(env.action_space)), params, steps)
    learner.start()

    def mask():
        return env.action_masks() if masks else None

    try:
        obs, _ = env.reset(seed=params["seed"])
        action = learner.begin_episode(1, obs, ActMode.EXPLORE, mask()).result(30)
        for _ in range(steps):
            obs, reward, terminated, truncated, _ = env.step(int(action))
            if terminated or truncated:
                learner.end_episode(1, float(reward), obs, truncated and not terminated, ActMode.EXPLORE)
                obs, _ = env.reset()
                action = learner.begin_episode(1, obs, ActMode.EXPLORE, mask()).result(30)
            else:
                action = learner.step(1, float(reward), obs, ActMode.EXPLORE, mask()).result(30)
        learner.begin_episode(2, obs, ActMode.GREEDY).result(30)  # a round trip: everything is learned
        assert learner.failure is None and learner.steps == steps
        return learner.model.policy.state_dict()
    finally:
        learner.close()


def test_one_client_sending_masks_learns_exactly_as_maskable_ppo_learn():
    expected = contrib_weights(STEPS, PARAMS)
    got = learner_weights(STEPS, PARAMS)
    assert expected.keys() == got.keys()
    for name in expected:
        assert th.allclose(expected[name], got[name], rtol=1e-4, atol=1e-5), f"{name} differs"
    unmasked = learner_weights(STEPS, PARAMS, masks=False)  # the masks mattered: without them, other weights
    assert any(not th.allclose(expected[name], unmasked[name], rtol=1e-4, atol=1e-5) for name in expected)


def test_a_batch_mixing_masked_and_unmasked_requests_masks_only_its_own_rows():
    learner = build_learner("MaskablePPO", "mixed", parse_space([[2], -1, 1]), parse_space(3),
                            {"n_steps": 8, "n_envs": 4, "seed": 0}, None)
    only_two = np.array([False, False, True])
    rng = np.random.default_rng(0)
    for t in range(12):  # 6 explore steps: rows 0-5 of each actor's segment, no update yet
        requests = [Request(Kind.BEGIN if t == 0 else Kind.STEP, actor, rng.uniform(-1, 1, 2).astype(np.float32),
                            1.0, mode=ActMode.EXPLORE if t % 2 else ActMode.GREEDY, ticket=actor,
                            mask=only_two if actor % 2 else None) for actor in (1, 2, 3, 4)]
        learner.algorithm.process(requests)
        answers = {a.ticket: int(np.asarray(a.action)) for a in learner.algorithm.take_answers()}
        assert answers[1] == answers[3] == 2, answers
    stored = learner.algorithm.buffer.action_masks  # type: ignore[attr-defined]
    segments = {actor: learner.algorithm._actors[actor].segment for actor in (1, 2, 3, 4)}
    for actor, segment in segments.items():
        expected = only_two if actor % 2 else np.ones(3)
        assert np.array_equal(stored[:6, segment], np.tile(expected, (6, 1))), (actor, stored[:6, segment])


@pytest.mark.parametrize("action_spec, groups", [(4, [4]), (["MultiDiscrete", [3, 2]], [3, 2]),
                                                 (["MultiBinary", 3], [2, 2, 2])])
def test_the_greedy_snapshot_answers_masked_steps_as_the_learner_does(action_spec, groups):
    learner = build_learner("MaskablePPO", "snap", parse_space([[5], "-inf", "inf"]), parse_space(action_spec),
                            {"seed": 3}, None)
    assert learner.greedy is not None and learner.greedy.network.takes_masks
    learner.start()
    try:
        rng = np.random.default_rng(0)
        observations = [rng.normal(size=5).astype(np.float32) for _ in range(64)]
        masks = []
        for _ in observations:
            mask = []
            for width in groups:
                part = rng.random(width) < 0.5
                part[rng.integers(width)] = True
                mask += part.tolist()
            masks.append(np.array(mask))
        requests = [Request(Kind.STEP, 1, obs, mask=mask) for obs, mask in zip(observations, masks)]
        expected = learner.algorithm._greedy(requests)  # the learner's masked greedy (sb3-contrib's distribution)
        learner.greedy.prepare()
        learner.begin_episode(9, observations[0], ActMode.GREEDY).result(30)  # the weights are published
        answered = learner.greedy.act_batch(observations, masks)
        assert answered is not None, "the snapshot declined masked steps"
        assert np.array_equal(np.asarray(answered[0]).reshape(expected.shape), expected)
        unmasked = learner.greedy.act_batch(observations)
        assert not np.array_equal(np.asarray(unmasked[0]).reshape(expected.shape), expected)  # masks mattered
    finally:
        learner.close()
