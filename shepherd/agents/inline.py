"""Greedy actions answered on the caller's thread, from a numpy copy of a small policy's actor.

A greedy act (evaluation, deployment) changes nothing in the learner, so it need not queue behind it. For
the common case — a vector observation through SB3's flatten extractor into an MLP of a few thousand
weights — a numpy forward of one observation costs about 10 us, less than handing the request to the
learner's thread and back (50-100 us on two cores, plus the learner's own torch forward). The learner keeps
a *snapshot*: the actor's weights copied into numpy arrays, rebuilt on the learner's thread after every
update while someone uses it, and swapped in with one assignment, so the event loop never reads a weight
that an optimizer is writing.

Everything else (images, dicts, other activations, networks too large to run on the event loop, gSDE)
gets no snapshot and is answered by the learner, batched, as before. The actions are SB3's deterministic
ones up to float rounding (numpy's and torch's float32 matrix products may round the last bit apart).
"""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch as th
from stable_baselines3.common.distributions import (BernoulliDistribution, CategoricalDistribution,
                                                    DiagGaussianDistribution, MultiCategoricalDistribution)
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import FlattenExtractor

#: the largest actor (in weights) answered on the event loop: about 30 us for one observation on this
#: machine's cores; larger ones are answered by the learner, batched, where a batch amortises them
MAX_WEIGHTS = 100_000

Greedy = Callable[[Any], np.ndarray]
_ACTIVATIONS: dict[type, Callable[[np.ndarray], np.ndarray]] = {
    th.nn.Tanh: np.tanh,
    th.nn.ReLU: lambda x: np.maximum(x, 0),
    th.nn.Identity: lambda x: x,
    th.nn.Flatten: lambda x: x,  # of one vector: nothing to do
}


def snapshot(policy: Any, observation_space: gym.Space) -> Greedy | None:
    """A function from one observation to SB3's deterministic action (before `_env_action`), computed
    with numpy from a copy of ``policy``'s weights now; None if this policy is not served that way."""
    if not (isinstance(observation_space, gym.spaces.Box) and len(observation_space.shape) == 1):
        return None
    try:
        return _build(policy)
    except _Unsupported:
        return None


def agrees(greedy: Greedy, policy: Any, observation_space: gym.Space, samples: int = 8) -> bool:
    """Whether ``greedy`` gives the policy's own deterministic actions on a few observations."""
    rng = np.random.default_rng(0)
    low = np.nan_to_num(observation_space.low, neginf=-1.0, posinf=1.0)
    high = np.nan_to_num(observation_space.high, neginf=1.0, posinf=1.0)
    for _ in range(samples):
        obs = rng.uniform(low, high).astype(np.float32)
        with th.no_grad():
            expected = policy._predict(th.as_tensor(obs[None]), deterministic=True).numpy()[0]
        ours = np.asarray(greedy(obs))
        if ours.shape != expected.shape or not np.allclose(ours.astype(np.float64), expected, atol=1e-4):
            return False
    return True


class _Unsupported(Exception):
    pass


def _build(policy: Any) -> Greedy:
    if isinstance(policy, ActorCriticPolicy):  # PPO, A2C
        _flat(policy.pi_features_extractor)
        layers = _layers(policy.mlp_extractor.policy_net) + _layers(policy.action_net)
        return _head(layers, policy.action_dist)
    q_net = getattr(policy, "q_net", None)
    if q_net is not None and hasattr(q_net, "q_net"):  # DQN: the argmax of the Q-values
        _flat(q_net.features_extractor)
        return _with(_layers(q_net.q_net), lambda out: out.argmax())
    actor = getattr(policy, "actor", None)
    if actor is not None and hasattr(actor, "latent_pi"):  # SAC: the mode of a squashed Gaussian
        if getattr(actor, "use_sde", False):
            raise _Unsupported("gSDE")
        _flat(actor.features_extractor)
        return _with(_layers(actor.latent_pi) + _layers(actor.mu), np.tanh)
    if actor is not None and hasattr(actor, "mu"):  # TD3, DDPG: the deterministic actor (ends in tanh)
        _flat(actor.features_extractor)
        return _with(_layers(actor.mu), lambda out: out)
    raise _Unsupported(type(policy).__name__)


def _head(layers: list, distribution: Any) -> Greedy:
    if isinstance(distribution, CategoricalDistribution):
        return _with(layers, lambda out: out.argmax())
    if isinstance(distribution, MultiCategoricalDistribution):
        bounds = np.cumsum(distribution.action_dims)[:-1]
        return _with(layers, lambda out: np.array([part.argmax() for part in np.split(out, bounds)]))
    if isinstance(distribution, BernoulliDistribution):
        return _with(layers, lambda out: (out > 0).astype(np.float32))  # round(sigmoid(logit)), as torch
    if isinstance(distribution, DiagGaussianDistribution):
        return _with(layers, lambda out: out)  # the mean
    raise _Unsupported(type(distribution).__name__)


def _flat(extractor: Any) -> None:
    if not isinstance(extractor, FlattenExtractor):
        raise _Unsupported(type(extractor).__name__)


def _layers(module: th.nn.Module) -> list[tuple[np.ndarray, np.ndarray] | Callable]:
    """The module as numpy steps: (weight, bias) pairs for linear layers, functions for activations."""
    if isinstance(module, th.nn.Sequential):
        return [step for child in module for step in _layers(child)]
    if isinstance(module, th.nn.Linear):
        weight = module.weight.detach().numpy().T.copy()  # (in, out): x @ weight
        bias = (module.bias.detach().numpy().copy() if module.bias is not None
                else np.zeros(weight.shape[1], dtype=np.float32))
        return [(weight, bias)]
    activation = _ACTIVATIONS.get(type(module))
    if activation is None:
        raise _Unsupported(type(module).__name__)
    return [activation]


def _with(layers: list, head: Callable[[np.ndarray], np.ndarray]) -> Greedy:
    if sum(step[0].size + step[1].size for step in layers if isinstance(step, tuple)) > MAX_WEIGHTS:
        raise _Unsupported("too large for the event loop")

    def greedy(obs: Any) -> np.ndarray:
        x = np.asarray(obs, dtype=np.float32).reshape(-1)
        for step in layers:
            if isinstance(step, tuple):
                x = x @ step[0] + step[1]
            else:
                x = step(x)
        return head(x)

    return greedy
