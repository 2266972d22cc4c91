"""An agent's behaviour policy of one phase as one ONNX file that samples with uniform noise the client draws.

Issue 35's policy file (acting at the client): inputs ``obs`` (``obs.<key>`` per Dict key; the greedy
export's observation inputs, docs/export.md), ``noise`` (float32 ``[batch, K]``, uniform in [0, 1), drawn by
the client; K is the metadata's ``noise_size``, possibly 0) and ``action_mask`` for agents that take masks;
outputs ``action`` (what the env gets, as the greedy export's ``action``) and ``sample`` (the policy's own
draw, before SB3 clips or unscales it: what SB3 stores in its rollout or replay buffer).

The behaviour of each phase is what the server's learner acts with in it:

- ``heatup``: uniform random over the action space, as ``action_space.sample()`` (an off-policy Box agent's
  action noise is added to it, as SB3's ``_sample_action`` does; a masked agent's is uniform over the
  allowed choices);
- ``train``: the exploration policy: a categorical draw by inverse CDF (Discrete, per sub-action for
  MultiDiscrete, per bit for MaskablePPO's MultiBinary), a Bernoulli draw per bit (MultiBinary), a diagonal
  Gaussian by Box-Muller (PPO, A2C, TRPO Box: ``sample`` unclipped, ``action`` clipped), DQN's and QR-DQN's
  epsilon-greedy with the current ``exploration_rate``, SAC's (TQC's, CrossQ's) squashed Gaussian, TD3's
  and DDPG's actor; then ``NormalActionNoise`` for off-policy Box agents, clipped to [-1, 1]. An off-policy
  agent before ``learning_starts`` acts as in heatup, as its learner does. An advised client (PPO, A2C)
  draws from the product of its policy and its advisor's (`shepherd.agents.sb3.mixing`): the file holds both
  networks, the advisor's normalising the raw observations with the advisor's own statistics, as the
  version's `AdviceFrame` fixes them (the server evaluates the version's uploads under the same frame);
- ``evaluate`` and ``deploy``: the greedy policy, as `export_onnx` writes it (K = 0, noise ignored).

`GREEDY_FILE` is no phase but rides the same per-version builds (`behaviour_of_version`): the greedy file
itself, as `export_onnx` writes it (docs/export.md's format, no ``noise``), which front ends answer image
agents' evaluate-mode steps with (`shepherd.policies.onnx_snapshot`).

Noise columns, in this order: the policy's draw (1 per categorical choice or bit, one pair per two Gaussian
dimensions, 2 for epsilon-greedy: the coin, then the random action), then the action noise (one pair per two
dimensions). What cannot act at the client is refused with `NotActableAtClient`, which says why.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping, NamedTuple

import numpy as np
from gymnasium import spaces
from onnx import TensorProto
from sb3_contrib.common.maskable.distributions import (MaskableCategoricalDistribution,
                                                       MaskableMultiCategoricalDistribution)
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from stable_baselines3.common.distributions import (BernoulliDistribution, CategoricalDistribution,
                                                    DiagGaussianDistribution, MultiCategoricalDistribution)
from stable_baselines3.common.noise import NormalActionNoise
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.sac.policies import LOG_STD_MAX, LOG_STD_MIN

from shepherd.agents.sb3.advised import AdviceFrame, AdvisedOnPolicyAdapter
from shepherd.agents.export.export import (METADATA_KEY, Normalization, NotExportable, _greedy, _normalize,
                                           _observation_inputs, _to_env, agent_filters, export_onnx, file_metadata)
from shepherd.agents.export.onnx_graph import GraphBuilder, features, image_input, module
from shepherd.agents.greedy_policy import policy_takes_masks
from shepherd.agents.sb3.base import SB3Algorithm
from shepherd.wire.spaces import mask_size

#: the phases a behaviour file is built for (a session's phase, issue 35's login reply)
PHASES = ("heatup", "train", "evaluate", "deploy")
NOISE_INPUT, MASK_INPUT, ACTION_OUTPUT, SAMPLE_OUTPUT = "noise", "action_mask", "action", "sample"
#: not a phase: the greedy file (`export_onnx`'s), built per version as behaviour files are, for front ends
GREEDY_FILE = "greedy"

__all__ = ["GREEDY_FILE", "PHASES", "NotActableAtClient", "behaviour_adapter", "behaviour_onnx", "check_actable", "obs_input"]


class NotActableAtClient(NotExportable):
    """The agent's policy cannot act at the client (per-session state, a part with no ONNX form); the
    message says why, and that acting at the server (``"acting": "server"``) works."""


def obs_input(key: str) -> str:
    """The behaviour file's input of an observation: ``obs``, or ``obs.<key>`` for a Dict's key."""
    return "obs" if key == "" else f"obs.{key}"


class _Noise:
    """The ``noise`` input, handed out column by column as the graph consumes it (``taken``: columns so far)."""

    def __init__(self, graph: GraphBuilder) -> None:
        self.graph = graph
        self.taken = 0

    def take(self, width: int) -> str:
        """The next ``width`` columns, [batch, width]."""
        self.taken += width
        return _columns(self.graph, NOISE_INPUT, self.taken - width, width)

    def normals(self, width: int) -> str:
        """``width`` standard normals per row, by Box-Muller from ``2 * ceil(width / 2)`` uniforms:
        ``sqrt(-2 ln(1 - u1)) * (cos, sin)(2 pi u2)``."""
        graph, half = self.graph, (width + 1) // 2
        u1, u2 = self.take(half), self.take(half)
        radius = graph.op("Sqrt", graph.op("Mul", graph.const(-2.0, "minus_two"),
                                           graph.op("Log", graph.op("Sub", graph.const(1.0, "one"), u1))))
        angle = graph.op("Mul", graph.const(2 * math.pi, "two_pi"), u2)
        both = graph.op("Concat", graph.op("Mul", radius, graph.op("Cos", angle)),
                        graph.op("Mul", radius, graph.op("Sin", angle)), axis=1)
        return both if width == 2 * half else _columns(graph, both, 0, width)


def check_actable(adapter: SB3Algorithm, agent: str, algorithm: str) -> None:
    """Whether the agent's policy can act at the client at all (what a login with ``"acting": "client"``
    asks), without building a file.

    Raises:
        NotActableAtClient: a recurrent policy, frame stacking, Ornstein-Uhlenbeck (or any other non-Normal)
            action noise, gSDE.
    """
    model: Any = adapter.model
    policy: Any = model.policy
    why = None
    if isinstance(policy, RecurrentActorCriticPolicy):
        why = (f"{algorithm}'s action depends on each actor's LSTM state, which the server keeps per session and "
               "the policy file has no input for")
    elif getattr(policy, "use_sde", False) or getattr(getattr(policy, "actor", None), "use_sde", False):
        why = f"{algorithm} explores with gSDE, whose exploration matrix is state kept between steps"
    elif getattr(model, "action_noise", None) is not None and type(model.action_noise) is not NormalActionNoise:
        why = (f"{algorithm}'s action noise {type(model.action_noise).__name__} keeps a state per session (its "
               "last value), which the policy file has no input for; normal action noise acts at the client")
    if why is None:
        try:
            agent_filters(adapter, agent)
        except NotExportable as error:
            why = str(error)
    if why is not None:
        raise NotActableAtClient(f"agent {agent} cannot act at the client: {why}; log in with "
                                 '"acting": "server" instead')


def behaviour_onnx(adapter: SB3Algorithm, agent: str, algorithm: str, phase: str,
                   normalization: Mapping[str, Normalization] | None = None,
                   filters: dict[str, Any] | None = None) -> bytes:
    """The serialized ONNX model of the adapter's behaviour policy in ``phase`` (one of `PHASES`), with the
    metadata ``shepherd`` as `export_onnx` writes it plus ``phase`` and ``noise_size``. ``normalization``
    and ``filters`` as `export_onnx` takes them (statistics by observation key, "" for a non-Dict space).

    Raises:
        ValueError: an unknown phase.
        NotActableAtClient: what `check_actable` refuses, and anything `export_onnx` refuses (a layer or
            extractor with no exact ONNX form, statistics that do not fit), with its reason.
    """
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; a behaviour file is built for one of {', '.join(PHASES)}")
    check_actable(adapter, agent, algorithm)
    try:
        graph, takes_masks, noise_size, advice = _build(adapter, phase, dict(normalization or {}))
        metadata = file_metadata(adapter, agent, algorithm, takes_masks, normalization, filters, obs_input)
        metadata.update(phase=phase, noise_size=noise_size)
        if advice is not None:  # an advised client's training file: whose policy it mixes in, and how strongly
            metadata["advice"] = {"advisor": advice.advisor, "strength": advice.strength}
        model = graph.model(f"shepherd_{algorithm}_{phase}", {METADATA_KEY: json.dumps(metadata)})
    except NotActableAtClient:
        raise
    except NotExportable as error:
        raise NotActableAtClient(f"agent {agent} cannot act at the client: {error}; log in with "
                                 '"acting": "server" instead') from error
    return model.SerializeToString()


def behaviour_adapter(adapter: SB3Algorithm, agent: str, algorithm: str, phase: str) -> bytes:
    """`behaviour_onnx` with the agent's own filters (``adapter.filtering``): its observation normalisation
    with the current statistics, its settings and statistics as the metadata's ``filters``.

    Raises:
        ValueError: an unknown phase.
        NotActableAtClient: as `behaviour_onnx` (frame stacking among them).
    """
    check_actable(adapter, agent, algorithm)
    normalization, filters = agent_filters(adapter, agent)
    return behaviour_onnx(adapter, agent, algorithm, phase, normalization, filters)


def behaviour_of_version(adapter: SB3Algorithm, agent: str, algorithm: str, phase: str) -> tuple[int, bytes]:
    """The adapter's current policy version and its behaviour file of ``phase``, normalising observations with
    the statistics of that version (``adapter.version_filtering``: what the learner normalises an upload of
    this version with), else the agent's current ones. On the learner's thread (`ThreadedLearner.behaviour`).

    ``phase`` `GREEDY_FILE`: the greedy file as `export_onnx` writes it, which any exportable policy has (an
    advised client's: its own network, as its greedy steps are answered).

    Raises: as `behaviour_adapter`; for `GREEDY_FILE`, `NotExportable` as `export_adapter`.
    """
    if phase == GREEDY_FILE:
        normalization, filters = agent_filters(adapter, agent, adapter.version_filtering or adapter.filtering)
        return adapter.version, export_onnx(adapter, agent, algorithm, normalization, filters)
    check_actable(adapter, agent, algorithm)
    normalization, filters = agent_filters(adapter, agent, adapter.version_filtering or adapter.filtering)
    return adapter.version, behaviour_onnx(adapter, agent, algorithm, phase, normalization, filters)


def _build(adapter: SB3Algorithm, phase: str, normalization: dict[str, Normalization]
           ) -> tuple[GraphBuilder, bool, int, AdviceFrame | None]:
    """The graph (inputs, outputs), whether it takes masks, its noise size, and the advice it mixes in."""
    model: Any = adapter.model
    policy: Any = model.policy
    observation_space, action_space = adapter.observation_space, adapter.action_space
    takes_masks = policy_takes_masks(policy)
    off_policy = isinstance(model, OffPolicyAlgorithm)
    graph = GraphBuilder()
    inputs = _observation_inputs(graph, adapter.client_space, normalization, obs_input)
    noise = _Noise(graph)
    noise_index = len(graph.inputs)
    graph.input(NOISE_INPUT, TensorProto.FLOAT, (0,))  # its width is set once the graph has taken its columns
    mask = graph.input(MASK_INPUT, TensorProto.BOOL, (mask_size(action_space) or 0,)) if takes_masks else None
    if off_policy and phase == "train" and model.num_timesteps < model.learning_starts:
        phase = "heatup"  # as the off-policy learner acts until learning_starts
    advice = None
    if phase in ("evaluate", "deploy"):
        sample, elem_type = _greedy(graph, policy, observation_space, action_space, inputs, mask)
    elif phase == "heatup":
        sample, elem_type = _uniform(graph, noise, action_space, mask, off_policy)
    else:
        advice = adapter.advice_frame() if isinstance(adapter, AdvisedOnPolicyAdapter) else None
        advisor = None if advice is None else _advisor(graph, adapter, advice)
        sample, elem_type = _explore(graph, noise, model, observation_space, action_space, inputs, mask, advisor)
    if off_policy and isinstance(action_space, spaces.Box):
        if phase not in ("evaluate", "deploy"):
            sample = _action_noise(graph, noise, model.action_noise, sample)
        # SB3's clip after action noise; and onnxruntime's Tanh can return 1.0000001 where torch's saturates at 1
        sample = graph.op("Clip", sample, graph.const(-1.0, "minus_one"), graph.const(1.0, "one"))
    shape = tuple(int(n) for n in action_space.shape or ())
    if shape and not isinstance(action_space, spaces.Discrete):
        sample = graph.op("Reshape", sample, graph.const([-1, *shape], "shape", np.int64))
    graph.output(_to_env(graph, adapter, sample), ACTION_OUTPUT, elem_type, shape)
    graph.output(sample, SAMPLE_OUTPUT, elem_type, shape)
    noise_size = noise.taken
    graph.inputs[noise_index].type.tensor_type.shape.dim[1].dim_value = noise_size
    return graph, takes_masks, noise_size, advice


def _squeeze(graph: GraphBuilder, x: str) -> str:
    """[batch, 1] -> [batch]."""
    return graph.op("Squeeze", x, graph.const([1], "axes", np.int64))


def _columns(graph: GraphBuilder, x: str, start: int, width: int) -> str:
    """Columns ``start`` to ``start + width`` of a [batch, n] tensor."""
    return graph.op("Slice", x, graph.const([start], "start", np.int64), graph.const([start + width], "end", np.int64),
                    graph.const([1], "axis", np.int64))


def _uniform(graph: GraphBuilder, noise: _Noise, space: spaces.Space, mask: str | None, off_policy: bool
             ) -> tuple[str, int]:
    """``action_space.sample()``: uniform over the space (over the allowed choices with a mask); an
    off-policy Box's as the scaled action in [-1, 1] its replay buffer stores."""
    if mask is not None:  # zero logits with the masked ones at -inf: uniform over what the mask allows
        width = mask_size(space) or 0
        logits = graph.op("Where", mask, graph.const(np.zeros(width), "zeros"), graph.const(-np.inf, "masked"))
        dims = [2] * int(np.prod(space.shape)) if isinstance(space, spaces.MultiBinary) else _dims(space)
        return _categorical(graph, noise, logits, dims, isinstance(space, spaces.Discrete)), TensorProto.INT64
    if isinstance(space, spaces.Discrete):
        return _index(graph, noise.take(1), int(space.n), single=True), TensorProto.INT64
    if isinstance(space, spaces.MultiDiscrete):
        nvec = np.asarray(space.nvec).reshape(-1)
        return _index(graph, noise.take(len(nvec)), nvec), TensorProto.INT64
    if isinstance(space, spaces.MultiBinary):
        bits = graph.op("Less", noise.take(int(np.prod(space.shape))), graph.const(0.5, "half"))
        return graph.op("Cast", bits, to=TensorProto.INT64), TensorProto.INT64
    if isinstance(space, spaces.Box):
        u = noise.take(int(np.prod(space.shape)))
        if off_policy:  # scaled into [-1, 1): 2 u - 1
            return graph.op("Sub", graph.op("Mul", u, graph.const(2.0, "two")), graph.const(1.0, "one")), TensorProto.FLOAT
        low = np.asarray(space.low, dtype=np.float32).reshape(-1)
        high = np.asarray(space.high, dtype=np.float32).reshape(-1)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise NotExportable("uniform random actions need a Box with finite bounds")
        scaled = graph.op("Mul", u, graph.const(high - low, "range"))
        return graph.op("Add", graph.const(low, "low"), scaled), TensorProto.FLOAT
    raise NotExportable(f"random actions in {type(space).__name__} have no ONNX form here")


def _index(graph: GraphBuilder, u: str, n: Any, single: bool = False) -> str:
    """``floor(u * n)`` as int64 (at most n - 1): a uniform choice among n; [batch] if ``single``."""
    n = np.asarray(n, dtype=np.float32)
    index = graph.op("Min", graph.op("Floor", graph.op("Mul", u, graph.const(n, "n"))), graph.const(n - 1, "last"))
    index = graph.op("Cast", index, to=TensorProto.INT64)
    return _squeeze(graph, index) if single else index


def _dims(space: spaces.Space) -> list[int]:
    """The number of choices per sub-action of a Discrete or MultiDiscrete space."""
    if isinstance(space, spaces.Discrete):
        return [int(space.n)]
    if isinstance(space, spaces.MultiDiscrete):
        return [int(n) for n in np.asarray(space.nvec).reshape(-1)]
    raise NotExportable(f"categorical draws in {type(space).__name__} have no ONNX form here")


def _categorical(graph: GraphBuilder, noise: _Noise, logits: str, dims: list[int], single: bool) -> str:
    """A categorical draw per group of ``dims`` logits (softmax), by inverse CDF on one uniform each: the
    choice k with ``cdf[k-1] <= u < cdf[k]``, the CDF divided by its last value so that it ends at exactly
    1 (a choice of probability 0, masked, is never drawn). [batch] if ``single``, else [batch, groups]."""
    u = noise.take(len(dims))
    parts, start = [], 0
    for group, width in enumerate(dims):
        part = logits if len(dims) == 1 else _columns(graph, logits, start, width)
        cdf = graph.op("CumSum", graph.op("Softmax", part, axis=-1), graph.const(1, "axis", np.int64))
        cdf = graph.op("Div", cdf, _columns(graph, cdf, width - 1, 1))
        below = graph.op("LessOrEqual", cdf, _columns(graph, u, group, 1))
        parts.append(graph.op("ReduceSum", graph.op("Cast", below, to=TensorProto.INT64),
                              graph.const([1], "axes", np.int64), keepdims=0 if single else 1))
        start += width
    return parts[0] if len(parts) == 1 else graph.op("Concat", *parts, axis=1)


class _Advisor(NamedTuple):
    """An advised client's advice in its behaviour file (`AdviceFrame`): the advisor's action-net output for
    the file's observations (logits, or a Gaussian's mean), its policy and the strength."""

    output: str
    policy: Any
    strength: float


def _advisor(graph: GraphBuilder, adapter: SB3Algorithm, frame: AdviceFrame) -> _Advisor:
    """The advisor's network on the file's raw observation inputs, normalised with the advisor's statistics."""
    policy: Any = frame.policy
    normalization = agent_filters(adapter, "advisor", frame.filtering)[0] if frame.filtering is not None else None
    space = adapter.client_space
    subspaces = dict(space.spaces) if isinstance(space, spaces.Dict) else {"": space}
    inputs = {}
    for key, subspace in subspaces.items():
        x, stats = obs_input(key), (normalization or {}).get(key)
        if stats is not None:
            x = _normalize(graph, subspace, stats, x, obs_input(key))
        inputs[key] = image_input(graph, subspace, x)
    x = features(graph, policy.pi_features_extractor, adapter.observation_space, inputs, policy.normalize_images)
    return _Advisor(module(graph, policy.action_net, module(graph, policy.mlp_extractor.policy_net, x)), policy,
                    frame.strength)


def _explore(graph: GraphBuilder, noise: _Noise, model: Any, observation_space: spaces.Space,
             action_space: spaces.Space, inputs: dict[str, str], mask: str | None,
             advisor: _Advisor | None = None) -> tuple[str, int]:
    """The policy's exploring draw (before action noise): an off-policy Box's scaled into [-1, 1]; an advised
    client's from the product of its policy and its advisor's (`shepherd.agents.sb3.mixing`)."""
    policy: Any = model.policy
    if isinstance(policy, (ActorCriticPolicy, MaskableActorCriticPolicy)):  # PPO, A2C, TRPO, MaskablePPO
        x = features(graph, policy.pi_features_extractor, observation_space, inputs, policy.normalize_images)
        logits = module(graph, policy.action_net, module(graph, policy.mlp_extractor.policy_net, x))
        if mask is not None:
            logits = graph.op("Where", mask, logits, graph.const(-np.inf, "masked"))
        distribution = policy.action_dist
        if advisor is not None and isinstance(distribution, CategoricalDistribution):  # own + k log pi_adv
            shift = graph.op("Mul", graph.const(advisor.strength, "strength"),
                             graph.op("LogSoftmax", advisor.output, axis=-1))
            logits = graph.op("Add", logits, shift)
        if isinstance(distribution, (CategoricalDistribution, MaskableCategoricalDistribution)):
            return _categorical(graph, noise, logits, _dims(action_space), single=True), TensorProto.INT64
        if isinstance(distribution, (MultiCategoricalDistribution, MaskableMultiCategoricalDistribution)):
            return _categorical(graph, noise, logits, list(distribution.action_dims), single=False), TensorProto.INT64
        if isinstance(distribution, BernoulliDistribution):  # bit = u < sigmoid(logit)
            bits = graph.op("Less", noise.take(int(distribution.action_dims)), graph.op("Sigmoid", logits))
            return graph.op("Cast", bits, to=TensorProto.INT64), TensorProto.INT64
        if isinstance(distribution, DiagGaussianDistribution):  # mean + exp(log_std) * z, unclipped
            log_std: Any = policy.log_std  # exp in torch, as the distribution computes it
            std = log_std.detach().exp().cpu()
            if advisor is not None:  # the product of Gaussians: precision-weighted mean, the precisions summed
                own = 1.0 / std.square()
                theirs = advisor.strength / advisor.policy.log_std.detach().exp().cpu().square()
                precision = own + theirs
                weighted = graph.op("Add", graph.op("Mul", logits, graph.const(own.numpy(), "own_precision")),
                                    graph.op("Mul", advisor.output, graph.const(theirs.numpy(), "advisor_precision")))
                logits = graph.op("Div", weighted, graph.const(precision.numpy(), "precision"))
                std = precision.rsqrt()
            z = noise.normals(int(std.shape[-1]))
            std_const = graph.const(std.numpy().astype(np.float32), "std")
            return graph.op("Add", logits, graph.op("Mul", std_const, z)), TensorProto.FLOAT
        raise NotExportable(f"the action distribution {type(distribution).__name__} has no sampling form here")
    if getattr(model, "exploration_rate", None) is not None and isinstance(action_space, spaces.Discrete):
        greedy, _ = _greedy(graph, policy, observation_space, action_space, inputs, mask)  # DQN, QR-DQN
        coin = _squeeze(graph, graph.op("Less", noise.take(1), graph.const(float(model.exploration_rate), "eps")))
        drawn = (_index(graph, noise.take(1), int(action_space.n), single=True) if mask is None
                 else _uniform(graph, noise, action_space, mask, True)[0])  # uniform over what the mask allows
        return graph.op("Where", coin, drawn, greedy), TensorProto.INT64
    actor = getattr(policy, "actor", None)
    if actor is not None and hasattr(actor, "latent_pi"):  # SAC, TQC, CrossQ: tanh(mean + std * z)
        x = features(graph, actor.features_extractor, observation_space, inputs, policy.normalize_images)
        latent = module(graph, actor.latent_pi, x)
        log_std = graph.op("Clip", module(graph, actor.log_std, latent), graph.const(float(LOG_STD_MIN), "log_std_min"),
                           graph.const(float(LOG_STD_MAX), "log_std_max"))
        z = noise.normals(int(np.prod(action_space.shape or (1,))))
        gaussian = graph.op("Add", module(graph, actor.mu, latent), graph.op("Mul", graph.op("Exp", log_std), z))
        return graph.op("Tanh", gaussian), TensorProto.FLOAT
    if actor is not None and hasattr(actor, "mu"):  # TD3, DDPG: the actor; action noise follows
        return _greedy(graph, policy, observation_space, action_space, inputs, None)
    raise NotExportable(f"the policy {type(policy).__name__} has no exploring form in Shepherd's behaviour files")


def _action_noise(graph: GraphBuilder, noise: _Noise, action_noise: Any, scaled: str) -> str:
    """SB3's ``scaled + action_noise()`` with ``NormalActionNoise`` (mu + sigma * z), before its clip to
    [-1, 1] (`_build` clips every off-policy Box sample); the action unchanged without noise."""
    if action_noise is None:
        return scaled
    mu = np.asarray(action_noise._mu, dtype=np.float32).reshape(-1)
    sigma = np.asarray(action_noise._sigma, dtype=np.float32).reshape(-1)
    z = noise.normals(int(mu.size))
    return graph.op("Add", scaled, graph.op("Add", graph.const(mu, "noise_mu"),
                                            graph.op("Mul", graph.const(sigma, "noise_sigma"), z)))
