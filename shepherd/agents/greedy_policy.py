"""Greedy actions answered on the caller's thread, from a numpy copy of a small policy's actor.

A greedy act (evaluation, deployment) changes nothing in the learner, so it need not queue behind it. For
the common case — a vector observation (or a board, flattened) through SB3's flatten extractor into an MLP of a few thousand
weights — a numpy forward of one observation costs about 10 us, less than handing the request to the
learner's thread and back (50-100 us on two cores, plus the learner's own torch forward). The learner keeps
a *snapshot*: the actor's weights copied into numpy arrays, rebuilt on the learner's thread after every
update while someone uses it, and swapped in with one assignment, so the event loop never reads a weight
that an optimizer is writing.

Served this way: PPO, A2C and TRPO (the actor's mean or argmax), MaskablePPO (the argmax of the masked
logits), DQN (the Q-values' argmax), QR-DQN (the argmax of the quantiles' mean), SAC and TQC (the squashed
Gaussian's mode), TD3 and DDPG. Everything else (images, dicts, other activations or layers such as
CrossQ's BatchRenorm, networks too large to run on the event loop, gSDE, recurrent policies, whose actions
depend on each actor's LSTM state kept by the learner) gets no snapshot and is answered by the learner,
batched, as before. The network this module builds from a policy is plain data (`shepherd.policies.greedy_network.GreedyNetwork`, which
needs no torch: a process without it can run one on published weights). The actions are SB3's
deterministic ones up to float rounding (numpy's and torch's float32 matrix products may round the last bit
apart).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch as th
from sb3_contrib.common.maskable.distributions import (MaskableCategoricalDistribution,
                                                       MaskableMultiCategoricalDistribution)
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from sb3_contrib.qrdqn.policies import QRDQNPolicy
from stable_baselines3.common.distributions import (BernoulliDistribution, CategoricalDistribution,
                                                    DiagGaussianDistribution, MultiCategoricalDistribution)
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.torch_layers import FlattenExtractor
from stable_baselines3.dqn.policies import DQNPolicy

from shepherd.policies import greedy_snapshot
from shepherd.agents.core import VersionedWeights, WeightSource
from shepherd.agents.filters import Filtering, observation_moments
from shepherd.policies.greedy_network import Greedy, GreedyNetwork, Step
from shepherd.policies.transforms import ActionTransform

logger = logging.getLogger(__name__)

#: the largest actor (in weights) answered on the event loop: about 30 us for one observation on this
#: machine's cores; larger ones are answered by the learner, batched, where a batch amortises them
MAX_WEIGHTS = 100_000

_ACTIVATIONS: dict[type, str] = {  # torch's activation modules by their name in a `GreedyNetwork`
    th.nn.Tanh: "tanh",
    th.nn.ReLU: "relu",
    th.nn.Identity: "identity",
    th.nn.Flatten: "identity",  # of one vector: nothing to do
}


def greedy_function(policy: Any, observation_space: gym.Space) -> Greedy | None:
    """A function from a batch of observations (rows) to SB3's deterministic actions (before the action
    transform), computed with numpy from a copy of ``policy``'s weights now; None if this policy is not
    served that way."""
    found = network_of(policy, observation_space)
    return None if found is None else found.bind(weights_of(policy))


def weights_of(policy: th.nn.Module) -> dict[str, np.ndarray]:
    """A copy of a policy's weights as numpy arrays, by ``state_dict`` name."""
    return {name: tensor.detach().cpu().numpy().copy() for name, tensor in policy.state_dict().items()}


def network_of(policy: Any, observation_space: gym.Space) -> GreedyNetwork | None:
    """The greedy network of a policy, or None if numpy cannot serve it (see the module's docstring)."""
    # a Box of any shape goes through SB3's flatten extractor as one row (a board: PettingZoo's classic games),
    # but an image is divided by 255 first, which the copy does not do
    if not isinstance(observation_space, gym.spaces.Box) or is_image_space(observation_space):
        return None
    try:
        found = _build(policy)
    except _Unsupported:
        return None
    return found


def agrees(greedy: Greedy, policy: Any, observation_space: Any, samples: int = 8) -> bool:
    """Whether ``greedy`` gives the policy's own deterministic actions on a few observations (of a Box)."""
    rng = np.random.default_rng(0)
    low = np.nan_to_num(observation_space.low, neginf=-1.0, posinf=1.0)
    high = np.nan_to_num(observation_space.high, neginf=1.0, posinf=1.0)
    for _ in range(samples):
        obs = rng.uniform(low, high).astype(np.float32)
        with th.no_grad():
            expected = policy._predict(th.as_tensor(obs[None]), deterministic=True).numpy()[0]
        ours = np.asarray(greedy(obs[None]))
        if ours.shape != (1, *expected.shape) or not np.allclose(ours[0].astype(np.float64), expected, atol=1e-4):
            return False
    return True


#: the policies that take an ``action_mask``: MaskablePPO's, and DQN's and QR-DQN's (masked by Shepherd,
#: `shepherd.agents.sb3.value_masks`). The one place that says so for the numpy snapshot and the ONNX exporters;
#: the catalog's ``masks`` (which steps may carry a mask) is held to it by tests/unit/test_registry.py
MASKED_POLICIES: tuple[type, ...] = (MaskableActorCriticPolicy, DQNPolicy, QRDQNPolicy)


def policy_takes_masks(policy: Any) -> bool:
    """Whether a policy (or a policy class) takes action masks: its greedy action, its snapshots and its files."""
    return issubclass(policy if isinstance(policy, type) else type(policy), MASKED_POLICIES)


class _Unsupported(Exception):
    pass


def _build(policy: Any) -> GreedyNetwork:
    if isinstance(policy, RecurrentActorCriticPolicy):  # its actions depend on each actor's LSTM state
        raise _Unsupported("recurrent")
    if isinstance(policy, (ActorCriticPolicy, MaskableActorCriticPolicy)):  # PPO, A2C, TRPO; MaskablePPO's
        _flat(policy.pi_features_extractor)                                  # argmax of the masked logits
        steps = _layers(policy.mlp_extractor.policy_net, "mlp_extractor.policy_net.") + _layers(
            policy.action_net, "action_net.")
        head = _head(policy.action_dist)
        return _sized(policy, steps, head, takes_masks=policy_takes_masks(policy),
                      samples=head["kind"] in ("argmax", "argmax_each", "positive"))  # a distribution's logits
    q_net = getattr(policy, "q_net", None)
    if q_net is not None and hasattr(q_net, "q_net"):  # DQN: the argmax of the Q-values
        _flat(q_net.features_extractor)
        return _sized(policy, _layers(q_net.q_net, "q_net.q_net."), {"kind": "argmax"},
                      takes_masks=policy_takes_masks(policy))
    quantile_net = getattr(policy, "quantile_net", None)
    if quantile_net is not None and hasattr(quantile_net, "quantile_net"):  # QR-DQN: argmax of the quantiles' mean
        _flat(quantile_net.features_extractor)
        shape = [int(quantile_net.n_quantiles), int(quantile_net.action_space.n)]
        return _sized(policy, _layers(quantile_net.quantile_net, "quantile_net.quantile_net."),
                      {"kind": "quantile_mean_argmax", "shape": shape}, takes_masks=policy_takes_masks(policy))
    actor = getattr(policy, "actor", None)
    if actor is not None and hasattr(actor, "latent_pi"):  # SAC, TQC: the mode of a squashed Gaussian
        if getattr(actor, "use_sde", False):
            raise _Unsupported("gSDE")
        _flat(actor.features_extractor)
        return _sized(policy, _layers(actor.latent_pi, "actor.latent_pi.") + _layers(actor.mu, "actor.mu."),
                      {"kind": "tanh"})
    if actor is not None and hasattr(actor, "mu"):  # TD3, DDPG: the deterministic actor (ends in tanh)
        _flat(actor.features_extractor)
        return _sized(policy, _layers(actor.mu, "actor.mu."), {"kind": "identity"})
    raise _Unsupported(type(policy).__name__)


def _head(distribution: Any) -> dict[str, Any]:
    if isinstance(distribution, (CategoricalDistribution, MaskableCategoricalDistribution)):
        return {"kind": "argmax"}
    # (sb3-contrib's masked MultiBinary is a multi-categorical of two choices per bit: its argmax is the bit)
    if isinstance(distribution, (MultiCategoricalDistribution, MaskableMultiCategoricalDistribution)):
        return {"kind": "argmax_each", "bounds": [int(b) for b in np.cumsum(distribution.action_dims)[:-1]]}
    if isinstance(distribution, BernoulliDistribution):
        return {"kind": "positive"}  # round(sigmoid(logit)), as torch
    if isinstance(distribution, DiagGaussianDistribution):
        return {"kind": "identity"}  # the mean
    raise _Unsupported(type(distribution).__name__)


def _flat(extractor: Any) -> None:
    if not isinstance(extractor, FlattenExtractor):
        raise _Unsupported(type(extractor).__name__)


def _layers(module: th.nn.Module, prefix: str) -> list[Step]:
    """The module as steps: (weight name, bias name) for linear layers, names for activations."""
    if isinstance(module, th.nn.Sequential):
        return [step for index, child in enumerate(module) for step in _layers(child, f"{prefix}{index}.")]
    if isinstance(module, th.nn.Linear):
        return [(f"{prefix}weight", f"{prefix}bias" if module.bias is not None else None)]
    activation = _ACTIVATIONS.get(type(module))
    if activation is None:
        raise _Unsupported(type(module).__name__)
    return [activation]


def _sized(policy: th.nn.Module, steps: list[Step], head: dict[str, Any], takes_masks: bool = False,
           samples: bool = False) -> GreedyNetwork:
    state = policy.state_dict()
    size = sum(state[name].numel() for step in steps if isinstance(step, tuple) for name in step if name)
    if size > MAX_WEIGHTS:
        raise _Unsupported("too large for the event loop")
    return GreedyNetwork(steps, head, takes_masks, samples)


class FixedWeights:
    """A `WeightSource` that never changes: one version of a learner's weights, kept."""

    def __init__(self, weights: VersionedWeights) -> None:
        self.weights = weights

    @property
    def version(self) -> int:
        return self.weights.version

    def latest_weights(self) -> VersionedWeights:
        return self.weights


class GreedyPolicy:
    """Greedy actions on the caller's thread, from the weights a learner publishes (`WeightSource`).

    It acts only with the learner's current version: when none is published yet, or the published one is
    older, `act` returns None (the learner answers that step) and asking makes the learner publish anew.
    """

    #: a small batch is answered on the caller's thread (`shepherd.agents.futures.INLINE_NUMBERS`)
    always_off_loop = False

    def __init__(self, network: GreedyNetwork, source: WeightSource, actions: ActionTransform | Callable[[np.ndarray], Any],
                 name: str, filtering: Filtering | None = None) -> None:
        self.network = network
        self.source = source
        #: how the policy's actions become the env's: SB3's `ActionTransform` (which a snapshot sent to another
        #: process applies too: `portable`), or any function of a batch of actions
        self.actions = actions
        self.to_env = actions.to_env if isinstance(actions, ActionTransform) else actions
        #: the agent's observation normalisation, read with the learner's current statistics (None: none)
        self.filtering = filtering if filtering is not None and filtering.keys else None
        self.name = name
        self.broken = False
        self._greedy: Greedy | None = None
        self._version = -1
        self._binding = threading.Lock()  # a large batch acts on a worker thread while the loop acts on others

    def frozen(self) -> GreedyPolicy | None:
        """A greedy actor of the policy as the learner published it last, kept whatever the learner does
        next: its weights (`FixedWeights`) and its observation statistics as they are now. None: nothing
        published yet (asking makes the learner publish), or this actor is broken."""
        weights = self.source.latest_weights()
        if weights is None or self.broken:
            return None
        return GreedyPolicy(self.network, FixedWeights(weights), self.actions, self.name,
                           None if self.filtering is None else self.filtering.frozen())

    def act(self, obs: Any, mask: Any = None, rng: np.random.Generator | None = None) -> tuple[Any, int] | None:
        """The action for ``obs`` (under its action ``mask``, if any) and the policy version that chose it,
        or None: ask the learner. With ``rng``, a policy whose network `samples` draws the action from its
        distribution (a self-play opponent's); others stay greedy."""
        answered = self.act_batch([obs], None if mask is None else [mask], rng)
        return None if answered is None else (answered[0][0], answered[1])

    def act_batch(self, observations: list[Any], masks: list[Any] | None = None,
                  rng: np.random.Generator | None = None) -> tuple[Any, int] | None:
        """The actions (rows) for a list of observations (and their action masks, a list with None for
        an unmasked one; None: none is masked) and the policy version that chose them, or None: ask the
        learner (also for masks a network cannot apply)."""
        if not self.ready(masks):
            return None
        weights = self.source.latest_weights()
        if weights is None:
            return None
        with self._binding:
            if weights.version != self._version:
                self._greedy, self._version = self.network.bind(weights.arrays), weights.version
            greedy = self._greedy
        rows = None
        if masks is not None and any(mask is not None for mask in masks):
            width = next(len(mask) for mask in masks if mask is not None)
            rows = np.stack([np.ones(width, dtype=bool) if mask is None else mask for mask in masks])
        try:
            batch = np.stack(observations)
            if self.filtering is not None:
                batch = self.filtering.normalize_obs(batch)
            return self.to_env(greedy(batch, rows, rng)), weights.version  # type: ignore[misc]
        except Exception:  # a snapshot's bug must cost speed, not the request: the learner answers it
            logger.exception("agent %s: the greedy snapshot failed; the learner answers instead", self.name)
            self.broken = True
            return None

    def ready(self, masks: list[Any] | None = None) -> bool:
        """Whether `act_batch` would answer now: not broken, the masks (if any) applicable, and the learner's
        current weights published (asking makes the learner publish)."""
        if self.broken or (masks is not None and not self.network.takes_masks):
            return False
        weights = self.source.latest_weights()
        return weights is not None and weights.version == self.source.version

    def prepare(self) -> None:
        """Greedy steps are coming: have the learner publish its current weights."""
        self.source.latest_weights()

    def forget(self) -> None:
        """Drop the bound weights (the learner's were replaced)."""
        self._greedy, self._version = None, -1

    @property
    def portable(self) -> bool:
        """Whether `snapshot_bytes` can send this policy to another process: its action transform is SB3's
        (`ActionTransform`), and its observations are normalised by one Box's statistics, or not at all."""
        return (not self.broken and isinstance(self.actions, ActionTransform)
                and (self.filtering is None or self.filtering.keys == [None]))

    def snapshot_bytes(self, name: str, observation_space: gym.Space, action_space: gym.Space,
                       newer_than: int = -1) -> bytes | None:
        """The weights the learner published last, with everything a front end needs to act with them, as
        `shepherd.policies.greedy_snapshot` bytes named ``name``; None when nothing newer than ``newer_than`` is published yet
        (asking makes the learner publish). Only for a `portable` actor."""
        weights = self.source.latest_weights()
        if weights is None or weights.version <= newer_than:
            return None
        actions = self.actions
        assert isinstance(actions, ActionTransform) and self.portable, "snapshot_bytes of an actor not portable"
        moments, epsilon, clip = None, 1e-8, 10.0
        if self.filtering is not None:
            moments = observation_moments(self.filtering)[None]
            epsilon, clip = self.filtering.filters.epsilon, self.filtering.filters.clip_observations
        return greedy_snapshot.encode(name, weights.version, self.network, weights.arrays, observation_space, action_space,
                                actions.scaled, moments, epsilon, clip)


def greedy_policy_of(policy: Any, observation_space: gym.Space, source: WeightSource,
                 actions: ActionTransform | Callable[[np.ndarray], Any], name: str,
                 filtering: Filtering | None = None) -> GreedyPolicy | None:
    """A greedy actor for a policy that numpy can serve and that agrees with torch on its current
    weights; None otherwise. ``filtering``'s observation normalisation is applied to each batch first (with
    the learner's statistics as they are). Call it before the learner starts (it reads the policy)."""
    found = network_of(policy, observation_space)
    if found is None:
        return None
    if not agrees(found.bind(weights_of(policy)), policy, observation_space):
        logger.warning("agent %s: the greedy snapshot disagrees with the policy; not used", name)
        return None
    return GreedyPolicy(found, source, actions, name, filtering)
