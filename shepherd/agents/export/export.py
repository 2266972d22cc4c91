"""An agent's greedy policy as one ONNX file: the raw observation in, the action the server would answer out.

The graph holds everything between a client's observation and the action the learning server answers to
a greedy (evaluate-mode) step: the observation filters (normalisation with saved statistics, clipping),
SB3's observation preprocessing (one-hot, flatten, a Dict's keys concatenated; an image transposed to channels
first as ``VecTransposeImage`` does, scaled by 1/255 and run through its convolutions), the policy's deterministic
action (the argmax of the logits, masked ones first set to -inf for MaskablePPO; the Gaussian's mean; the
argmax of the Q-values or of the quantiles' mean; the squashed Gaussian's mode; TD3's and DDPG's actor)
and the action transform (`ActionTransform`: unscaling into the Box, or clipping to it). Its metadata
(``metadata_props["shepherd"]``) names the agent, algorithm, spaces, policy version and filters. The file
format is the contract in docs/export.md; ``shepherd.policies.onnx`` reads it without torch.

Built from the learner's adapter (an `SB3Algorithm` with its weights, as a checkpoint restores them):
`export_adapter` (its own filter's statistics) or `export_onnx` (statistics given). RecurrentPPO is refused (its action depends on each actor's LSTM state, which the file
has no input for), as is any layer `onnx_graph` has no exact form for.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
import onnx
from gymnasium import spaces
from onnx import TensorProto
from sb3_contrib.common.maskable.distributions import (MaskableCategoricalDistribution,
                                                       MaskableMultiCategoricalDistribution)
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from stable_baselines3.common.distributions import (BernoulliDistribution, CategoricalDistribution,
                                                    DiagGaussianDistribution, MultiCategoricalDistribution)
from stable_baselines3.common.policies import ActorCriticPolicy

import shepherd
from shepherd.agents.export.onnx_graph import GraphBuilder, NotExportable, features, image_input, input_type, module
from shepherd.agents.filters import Filtering
from shepherd.agents.greedy_policy import policy_takes_masks
from shepherd.agents.sb3.base import SB3Algorithm
from shepherd.wire.spaces import mask_size, space_to_json

#: the ``format`` of the metadata this module writes (a reader refuses others)
FORMAT = 1
#: the metadata's ``advice`` of an advised client's file: what it leaves out
ADVICE_LEFT_OUT = ("the client's own network's greedy action, without its advisor's: the mixed policy it acts "
                   "with while served needs the advisor's network, which a deployed client does not have")
#: the metadata key holding Shepherd's JSON object
METADATA_KEY = "shepherd"

__all__ = ["FORMAT", "METADATA_KEY", "Normalization", "NotExportable", "agent_filters", "export_adapter", "export_onnx",
           "file_metadata", "input_name", "metadata"]


@dataclass(frozen=True)
class Normalization:
    """Observation normalisation statistics (VecNormalize's semantics), applied before the policy:
    ``clip((obs - mean) / sqrt(var + epsilon), -clip, clip)`` in float64, then float32, as the agent's
    filter computes it (``agents/filters.py``)."""

    mean: np.ndarray
    var: np.ndarray
    epsilon: float = 1e-8
    clip: float = 10.0

    def apply(self, obs: Any) -> np.ndarray:
        """The normalised observation(s), as the exported graph computes them."""
        return np.clip((np.asarray(obs, dtype=np.float64) - self._mean()) / self._std(),
                       -self.clip, self.clip).astype(np.float32)

    def to_json(self) -> dict[str, Any]:
        return {"mean": self._mean().tolist(), "var": np.asarray(self.var, dtype=np.float64).tolist(),
                "epsilon": float(self.epsilon), "clip": float(self.clip)}

    def _mean(self) -> np.ndarray:
        return np.asarray(self.mean, dtype=np.float64)

    def _std(self) -> np.ndarray:
        return np.sqrt(np.asarray(self.var, dtype=np.float64) + self.epsilon)


def input_name(key: str) -> str:
    """The ONNX input of an observation: ``observation``, or ``observation.<key>`` for a Dict's key."""
    return "observation" if key == "" else f"observation.{key}"


def export_onnx(adapter: SB3Algorithm, agent: str, algorithm: str,
                normalization: Mapping[str, Normalization] | None = None,
                filters: dict[str, Any] | None = None, client: str | None = None) -> bytes:
    """The serialized ONNX model of the adapter's greedy policy, with Shepherd's metadata.

    ``normalization`` gives the statistics per observation key ("" for a non-Dict space; a Dict's keys
    otherwise; keys left out are not normalised). ``filters`` is the metadata's ``filters`` object
    (default: the normalisation statistics given, or null without any). ``client`` names an advised agent's
    client: the file is that client's own network, and the metadata says so (``client``, ``advice``).

    Raises:
        NotExportable: a recurrent policy, a layer or extractor with no exact ONNX form, normalisation of
            a non-Box observation or of an unknown key, or statistics of the wrong shape.
    """
    policy: Any = adapter.model.policy
    if isinstance(policy, RecurrentActorCriticPolicy):
        raise NotExportable(
            f"{algorithm}'s greedy action depends on each actor's LSTM state, which the server keeps per session "
            "and an exported policy file has no input for; export is not available for recurrent policies")
    observation_space, action_space = adapter.observation_space, adapter.action_space
    takes_masks = policy_takes_masks(policy)
    graph = GraphBuilder()
    inputs = _observation_inputs(graph, adapter.client_space, dict(normalization or {}))
    mask = graph.input("action_mask", TensorProto.BOOL, (mask_size(action_space) or 0,)) if takes_masks else None
    action, elem_type = _greedy(graph, policy, observation_space, action_space, inputs, mask)
    action = _to_env(graph, adapter, action)
    graph.output(action, "action", elem_type, tuple(int(n) for n in action_space.shape or ()))
    metadata = file_metadata(adapter, agent, algorithm, takes_masks, normalization, filters)
    if client is not None:
        metadata["client"] = client
        metadata["advice"] = ADVICE_LEFT_OUT
    model = graph.model(f"shepherd_{algorithm}_greedy", {METADATA_KEY: json.dumps(metadata)})
    return model.SerializeToString()


def export_adapter(adapter: SB3Algorithm, agent: str, algorithm: str, client: str | None = None) -> bytes:
    """`export_onnx` with the agent's own filters (``adapter.filtering``): observation normalisation with its
    current statistics inside the graph; the filters' settings and statistics as the metadata's ``filters``.

    Raises:
        NotExportable: as `export_onnx`, or frame stacking (each actor's past frames are state the file has
            no input for).
    """
    normalization, filters = agent_filters(adapter, agent)
    return export_onnx(adapter, agent, algorithm, normalization, filters, client)


def agent_filters(adapter: SB3Algorithm, agent: str, filtering: Filtering | None = None,
                  ) -> tuple[dict[str, Normalization] | None, dict[str, Any] | None]:
    """The agent's own observation normalisation (its current statistics, by key, or those of ``filtering``)
    and the metadata's ``filters`` object (its settings and statistics); (None, None) for an agent without
    active filters.

    Raises:
        NotExportable: frame stacking (each actor's past frames are state a file has no input for).
    """
    filtering = filtering if filtering is not None else adapter.filtering
    if filtering is None or not filtering.active:
        return None, None
    filters = filtering.filters
    if filters.frame_stack > 1:
        raise NotExportable(f"agent {agent} stacks {filters.frame_stack} frames, kept per session by the server; "
                            "an exported policy file has no input for past frames")
    normalization = {("" if key is None else key): Normalization(stats.mean, stats.var, filters.epsilon,
                                                                 filters.clip_observations)
                     for key, stats in filtering.observations.items()}
    return normalization, {**filters.to_json(), "statistics": filtering.state()}


def file_metadata(adapter: SB3Algorithm, agent: str, algorithm: str, takes_masks: bool,
                  normalization: Mapping[str, Normalization] | None, filters: dict[str, Any] | None,
                  name: Callable[[str], str] = input_name) -> dict[str, Any]:
    """The ``shepherd`` metadata object of a file built from the adapter (``filters``: as `export_onnx`
    takes it; ``name``: the ONNX input of an observation key, for the normalisation statistics' keys)."""
    if filters is None and normalization:
        filters = {"observation_normalization": {name(key): stats.to_json() for key, stats in normalization.items()}}
    action_space = adapter.action_space
    return {
        "format": FORMAT, "agent": agent, "algorithm": algorithm,
        "observation_space": space_to_json(adapter.client_space), "action_space": space_to_json(action_space),
        "policy_version": int(adapter.version), "takes_masks": takes_masks,
        "mask_size": mask_size(action_space) if takes_masks else None, "filters": filters,
        "exported_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "shepherd_version": shepherd.__version__,
    }


def _observation_inputs(graph: GraphBuilder, space: spaces.Space, normalization: dict[str, Normalization],
                        name: Callable[[str], str] = input_name) -> dict[str, str]:
    """The observation inputs by key ("" for a non-Dict space) of the clients' observation ``space``, each
    normalised if it has statistics, in the policy's layout (images channels first, `image_input`); ``name``
    gives each key's ONNX input."""
    subspaces = dict(space.spaces) if isinstance(space, spaces.Dict) else {"": space}
    unknown = sorted(set(normalization) - set(subspaces))
    if unknown:
        raise NotExportable(f"normalisation statistics for {unknown}, which the observation space has not "
                            f"(its keys: {sorted(subspaces)})")
    inputs = {}
    for key, subspace in subspaces.items():
        elem_type, shape = input_type(subspace)
        x = graph.input(name(key), elem_type, shape)
        stats = normalization.get(key)
        if stats is not None:
            x = _normalize(graph, subspace, stats, x, name(key))
        inputs[key] = image_input(graph, subspace, x)
    return inputs


def _normalize(graph: GraphBuilder, space: spaces.Space, stats: Normalization, x: str, where: str) -> str:
    if not isinstance(space, spaces.Box):
        raise NotExportable(f"{where}: only Box observations are normalised (VecNormalize's rule); "
                            f"this one is {type(space).__name__}")
    mean, std = stats._mean(), stats._std()
    for name, array in (("mean", mean), ("var", std)):
        try:
            fits = np.broadcast_shapes(array.shape, space.shape) == space.shape
        except ValueError:
            fits = False
        if not fits:
            raise NotExportable(f"{where}: normalisation {name} of shape {list(array.shape)} does not fit "
                                f"observations of shape {list(space.shape)}")
    # in float64, as the agent's filter computes it, then float32 as the policy takes it
    x = graph.op("Cast", x, to=TensorProto.DOUBLE)
    x = graph.op("Div", graph.op("Sub", x, graph.const(mean, "obs_mean", np.float64)),
                 graph.const(std, "obs_std", np.float64))
    x = graph.op("Clip", x, graph.const(-stats.clip, "clip_low", np.float64),
                 graph.const(stats.clip, "clip_high", np.float64))
    return graph.op("Cast", x, to=TensorProto.FLOAT)


def _greedy(graph: GraphBuilder, policy: Any, observation_space: spaces.Space, action_space: spaces.Space,
            inputs: dict[str, str], mask: str | None) -> tuple[str, int]:
    """The policy's deterministic action (before the action transform) and its ONNX element type."""
    if isinstance(policy, (ActorCriticPolicy, MaskableActorCriticPolicy)):  # PPO, A2C, TRPO, MaskablePPO
        x = features(graph, policy.pi_features_extractor, observation_space, inputs, policy.normalize_images)
        logits = module(graph, policy.action_net, module(graph, policy.mlp_extractor.policy_net, x))
        if mask is not None:  # masked-out logits can never be the argmax (sb3-contrib's masked distributions)
            logits = graph.op("Where", mask, logits, graph.const(-np.inf, "masked"))
        return _distribution_mode(graph, policy.action_dist, logits)
    q_net = getattr(policy, "q_net", None)
    if q_net is not None and hasattr(q_net, "q_net"):  # DQN: the argmax of the Q-values
        x = features(graph, q_net.features_extractor, observation_space, inputs, policy.normalize_images)
        q_values = module(graph, q_net.q_net, x)
        if mask is not None:  # Shepherd's masked DQN (`shepherd.agents.sb3.value_masks`)
            q_values = graph.op("Where", mask, q_values, graph.const(-np.inf, "masked"))
        return graph.op("ArgMax", q_values, axis=-1, keepdims=0), TensorProto.INT64
    quantile_net = getattr(policy, "quantile_net", None)
    if quantile_net is not None and hasattr(quantile_net, "quantile_net"):  # QR-DQN: argmax of the quantiles' mean
        out = module(graph, quantile_net.quantile_net,
                     features(graph, quantile_net.features_extractor, observation_space, inputs, policy.normalize_images))
        shape = graph.const([-1, int(quantile_net.n_quantiles), int(quantile_net.action_space.n)], "shape", np.int64)
        means = graph.op("ReduceMean", graph.op("Reshape", out, shape), axes=[1], keepdims=0)
        if mask is not None:  # Shepherd's masked QR-DQN: a disallowed action's mean is never the argmax
            means = graph.op("Where", mask, means, graph.const(-np.inf, "masked"))
        return graph.op("ArgMax", means, axis=-1, keepdims=0), TensorProto.INT64
    actor = getattr(policy, "actor", None)
    if actor is not None and hasattr(actor, "latent_pi"):  # SAC, TQC, CrossQ: the squashed Gaussian's mode
        if getattr(actor, "use_sde", False):
            raise NotExportable("gSDE actors are not exported")
        x = features(graph, actor.features_extractor, observation_space, inputs, policy.normalize_images)
        return graph.op("Tanh", module(graph, actor.mu, module(graph, actor.latent_pi, x))), TensorProto.FLOAT
    if actor is not None and hasattr(actor, "mu"):  # TD3, DDPG: the deterministic actor (ends in tanh)
        x = features(graph, actor.features_extractor, observation_space, inputs, policy.normalize_images)
        return module(graph, actor.mu, x), TensorProto.FLOAT
    raise NotExportable(f"the policy {type(policy).__name__} has no ONNX form in Shepherd's exporter")


def _distribution_mode(graph: GraphBuilder, distribution: Any, logits: str) -> tuple[str, int]:
    """The mode of an actor-critic's action distribution, from the action net's output."""
    if isinstance(distribution, (CategoricalDistribution, MaskableCategoricalDistribution)):
        return graph.op("ArgMax", logits, axis=-1, keepdims=0), TensorProto.INT64
    # (sb3-contrib's masked MultiBinary is a multi-categorical of two choices per bit: its argmax is the bit)
    if isinstance(distribution, (MultiCategoricalDistribution, MaskableMultiCategoricalDistribution)):
        parts, start = [], 0
        for width in distribution.action_dims:
            part = graph.op("Slice", logits, graph.const([start], "start", np.int64),
                            graph.const([start + width], "end", np.int64), graph.const([1], "axis", np.int64))
            parts.append(graph.op("ArgMax", part, axis=-1, keepdims=1))
            start += width
        return (parts[0] if len(parts) == 1 else graph.op("Concat", *parts, axis=1)), TensorProto.INT64
    if isinstance(distribution, BernoulliDistribution):  # round(sigmoid(logit)): the bit is set where logit > 0
        bits = graph.op("Greater", logits, graph.const(0.0, "zero"))
        return graph.op("Cast", bits, to=TensorProto.INT64), TensorProto.INT64
    if isinstance(distribution, DiagGaussianDistribution):
        return logits, TensorProto.FLOAT  # the mean
    raise NotExportable(f"the action distribution {type(distribution).__name__} has no ONNX form in Shepherd's "
                        "exporter")


def _to_env(graph: GraphBuilder, adapter: SB3Algorithm, action: str) -> str:
    """The action transform (`ActionTransform.to_env`): reshaped into the action space's shape, unscaled
    from [-1, 1] into a Box or clipped to it."""
    shape = tuple(int(n) for n in adapter.action_space.shape or ())
    if shape and not isinstance(adapter.action_space, spaces.Discrete):
        action = graph.op("Reshape", action, graph.const([-1, *shape], "shape", np.int64))
    transform = adapter.actions
    if not transform.box:
        return action
    low, high = np.asarray(transform.low, dtype=np.float32), np.asarray(transform.high, dtype=np.float32)
    if transform.scaled:  # low + 0.5 * (action + 1.0) * (high - low), in float32 as numpy computes it
        half = graph.op("Mul", graph.const(0.5, "half"), graph.op("Add", action, graph.const(1.0, "one")))
        return graph.op("Add", graph.const(low, "low"), graph.op("Mul", half, graph.const(high - low, "range")))
    return graph.op("Min", graph.op("Max", action, graph.const(low, "low")), graph.const(high, "high"))  # np.clip


def metadata(model: onnx.ModelProto) -> dict[str, Any] | None:
    """Shepherd's metadata object of a loaded model, or None if it carries none."""
    for prop in model.metadata_props:
        if prop.key == METADATA_KEY:
            return json.loads(prop.value)
    return None
