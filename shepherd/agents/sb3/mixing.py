"""The Actor-Advisor's mixed policy as arithmetic on SB3's distributions: the advice rows an advisor's
distribution gives, the product they make with the own policy, and the rollout buffer and policy hook that let
PPO's and A2C's ``train()`` evaluate every stored row under the very mixed policy that drew it
(`shepherd.agents.sb3.advised` is the learner that uses them; the behaviour file of an advised client acting at
the client builds the same product in ONNX, `shepherd.agents.export.behaviour`).

- discrete actions: ``pi(a) ∝ pi_own(a) * pi_adv(a)^k``, which is the softmax of the own logits shifted by
  ``k * log pi_adv`` — an additive shift of the logits, as an action mask shifts them;
- Gaussian actions: the product of ``N(mu, s^2)`` and ``N(mu_adv, s_adv^2)^k``, a Gaussian whose precision
  is ``1/s^2 + k/s_adv^2`` and whose mean is the precision-weighted mean.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generator

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import DictRolloutBuffer, RolloutBuffer
from stable_baselines3.common.distributions import CategoricalDistribution, DiagGaussianDistribution
from torch.distributions import Categorical, Normal


def advice_width(action_space: spaces.Space) -> int:
    """The width of an advice row: one log-probability per action, or two numbers per action dimension.

    Raises:
        ValueError: advice is not defined for this action space.
    """
    if isinstance(action_space, spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, spaces.Box):
        return 2 * int(np.prod(action_space.shape))
    raise ValueError(f"advice is defined for Discrete and Box actions, not {type(action_space).__name__}")


def advice_rows(advisor: Any, strength: float) -> th.Tensor:
    """The advisor's part of the mixed policy, from its SB3 distribution: ``k * log pi_adv`` (discrete), or
    ``[k/s^2, k*mu/s^2]`` (Gaussian)."""
    if isinstance(advisor, CategoricalDistribution):
        return strength * advisor.distribution.logits  # torch keeps them normalised: log-probabilities
    if isinstance(advisor, DiagGaussianDistribution):
        precision = strength / advisor.distribution.variance
        return th.cat([precision, precision * advisor.distribution.mean], dim=1)
    raise TypeError(f"no advice for {type(advisor).__name__}")


def mix(distribution: Any, rows: th.Tensor) -> Any:
    """Make ``distribution`` (SB3's, of the own policy) the mixed policy of the advice rows, in place.

    Discrete: the normalised product of the own probabilities and ``pi_adv^k`` (logits plus the rows).
    Gaussian: the product of the own Gaussian and the advisor's to the power k. Zero rows change nothing.
    """
    if isinstance(distribution, CategoricalDistribution):
        distribution.distribution = Categorical(logits=distribution.distribution.logits + rows)
    elif isinstance(distribution, DiagGaussianDistribution):
        own = distribution.distribution
        width = own.mean.shape[-1]
        own_precision = 1.0 / own.variance
        precision = own_precision + rows[:, :width]
        mean = (own.mean * own_precision + rows[:, width:]) / precision
        distribution.distribution = Normal(mean, precision.rsqrt())
    else:
        raise TypeError(f"no advice for {type(distribution).__name__}")
    return distribution


class Mixer:
    """The advice rows the policy mixes in now (None: none). Installed on an SB3 actor-critic policy, it
    mixes every distribution the policy makes (acting, ``evaluate_actions`` in training) while set."""

    def __init__(self) -> None:
        self.rows: th.Tensor | None = None

    def install(self, policy: Any) -> None:
        own = policy._get_action_dist_from_latent

        def mixed(latent_pi: th.Tensor) -> Any:
            distribution = own(latent_pi)
            rows = self.rows
            return distribution if rows is None else mix(distribution, rows)

        policy._get_action_dist_from_latent = mixed


if TYPE_CHECKING:  # what the mixin is mixed into (either buffer: the methods it extends are theirs)
    _Buffer = RolloutBuffer
else:
    _Buffer = object


class AdviceRows(_Buffer):
    """A rollout buffer's column of each row's advice (mixed into SB3's `RolloutBuffer` or `DictRolloutBuffer`); a
    minibatch hands its rows to the policy's `Mixer` as it is taken, so ``evaluate_actions`` sees the mixed policy
    of exactly those rows."""

    def __init__(self, *args: Any, advice_width: int = 1, **kwargs: Any) -> None:
        self.advice_width = advice_width
        self.mixer: Mixer | None = None
        super().__init__(*args, **kwargs)

    def reset(self) -> None:
        self.advice = np.zeros((self.buffer_size, self.n_envs, self.advice_width), dtype=np.float32)
        super().reset()

    def get(self, batch_size: int | None = None) -> Generator[Any, None, None]:
        if not self.generator_ready:
            self.advice = self.swap_and_flatten(self.advice)
        try:
            yield from super().get(batch_size)
        finally:
            if self.mixer is not None:
                self.mixer.rows = None

    def _get_samples(self, batch_inds: np.ndarray, env: Any = None) -> Any:
        if self.mixer is not None:
            self.mixer.rows = self.to_torch(self.advice[batch_inds])
        return super()._get_samples(batch_inds, env)


class AdvisedRolloutBuffer(AdviceRows, RolloutBuffer):
    """SB3's rollout buffer with each row's advice (`AdviceRows`)."""


class AdvisedDictRolloutBuffer(AdviceRows, DictRolloutBuffer):
    """SB3's rollout buffer of Dict observations with each row's advice (`AdviceRows`)."""


def policy_divergence(kept: Any, own: Any) -> th.Tensor:
    """The mean over a batch of KL(kept || own) of two SB3 action distributions of the same family."""
    divergence = th.distributions.kl_divergence(kept.distribution, own.distribution)
    if divergence.dim() > 1:
        divergence = divergence.sum(dim=-1)  # a Gaussian's independent dimensions
    return divergence.mean()
