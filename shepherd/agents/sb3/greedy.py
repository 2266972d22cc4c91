"""Greedy actions of an SB3 actor-critic policy for batches that nothing learns from (evaluation, deployment),
and the draws of acts that sample without being learned from (`modes`)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch as th
from stable_baselines3.common.distributions import (BernoulliDistribution, CategoricalDistribution,
                                                    DiagGaussianDistribution, MultiCategoricalDistribution)
from stable_baselines3.common.policies import ActorCriticPolicy
from sb3_contrib.common.maskable.distributions import (MaskableCategoricalDistribution,
                                                       MaskableMultiCategoricalDistribution)

from shepherd.agents.sb3.base import stack_observations


def draws(requests: Sequence[Any]) -> list[int | None]:
    """The requests' ``draw`` seeds (None: greedy), or an empty list when none of them draws."""
    seeds = [request.draw for request in requests]
    return seeds if any(seed is not None for seed in seeds) else []


def modes(distribution: Any, seeds: Sequence[int | None]) -> np.ndarray:
    """The actions of an SB3 distribution's rows that nothing learns from: its modes (greedy), but a row with a
    seed in ``seeds`` (empty: none) draws from the distribution with a numpy generator of that seed, as a
    frozen numpy copy samples (`shepherd.policies.greedy_network`: Gumbel-max over a categorical's logits, a
    logistic for a Bernoulli's sign), never touching torch's random numbers, which SB3's own sampling draws.
    A distribution without logits (a Gaussian) gives its mode, as the numpy copy does."""
    actions = distribution.get_actions(deterministic=True).numpy()
    rows = [(i, seed) for i, seed in enumerate(seeds) if seed is not None]
    if not rows:
        return actions
    if isinstance(distribution, (CategoricalDistribution, MaskableCategoricalDistribution)):
        logits = distribution.distribution.logits.numpy()
        for i, seed in rows:
            actions[i] = np.argmax(logits[i] + np.random.default_rng(seed).gumbel(size=logits[i].shape))
    elif isinstance(distribution, (MultiCategoricalDistribution, MaskableMultiCategoricalDistribution)):
        categoricals: Any = distribution.distribution  # one torch Categorical per part
        parts = [part.logits.numpy() for part in categoricals]
        for i, seed in rows:
            rng = np.random.default_rng(seed)
            actions[i] = [np.argmax(part[i] + rng.gumbel(size=part[i].shape)) for part in parts]
    elif isinstance(distribution, BernoulliDistribution):
        logits = distribution.distribution.logits.numpy()
        for i, seed in rows:
            actions[i] = (logits[i] + np.random.default_rng(seed).logistic(size=logits[i].shape) > 0)
    return actions


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
