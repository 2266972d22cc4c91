"""Greedy actions of an SB3 actor-critic policy for batches that nothing learns from (evaluation, deployment)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.distributions import (BernoulliDistribution, CategoricalDistribution,
                                                    DiagGaussianDistribution, MultiCategoricalDistribution)
from stable_baselines3.common.policies import ActorCriticPolicy

from shepherd.agents.sb3.base import stack_observations


@th.no_grad()
def greedy_actions(policy: ActorCriticPolicy, observations: list[Any], vector_observations: bool) -> np.ndarray:
    """The actor's layers and an argmax (or the mean), without building SB3's distribution object: the
    same actions as ``policy._predict(obs, deterministic=True)`` at a quarter of its cost, which is
    mostly that object's Python. Sampling (training) keeps SB3's distributions, and its random numbers.
    ``vector_observations``: float vectors through SB3's flatten extractor, handed to the layers as they are."""
    features: Any
    if vector_observations:
        obs_tensor = features = th.from_numpy(np.stack(observations).astype(np.float32, copy=False))
    else:
        obs_tensor, _ = policy.obs_to_tensor(stack_observations(observations))  # type: ignore[assignment]
        features = policy.extract_features(obs_tensor)
        features = features if policy.share_features_extractor else features[0]
    out = policy.action_net(policy.mlp_extractor.policy_net(features))
    distribution = policy.action_dist
    if isinstance(distribution, CategoricalDistribution):
        actions = out.argmax(dim=1)
    elif isinstance(distribution, MultiCategoricalDistribution):
        parts = th.split(out, list(distribution.action_dims), dim=1)
        actions = th.stack([part.argmax(dim=1) for part in parts], dim=1)
    elif isinstance(distribution, BernoulliDistribution):
        actions = (out > 0).to(out.dtype)  # round(sigmoid(logit)), 0.5 rounding to 0 as torch.round does
    elif isinstance(distribution, DiagGaussianDistribution):
        actions = out  # the mean
    else:
        actions = policy._predict(obs_tensor, deterministic=True)
    return actions.numpy()
