"""A learner's greedy policy as bytes, and back: what a front end answers evaluate-mode steps with.

The head (``run.py --front-ends K``) sends a front end the *snapshot* of an agent's greedy policy (or of one
client's, in an advised agent) on the private ``GET /internal/snapshot`` (docs/front-ends.md): the greedy
plan (`shepherd.policies.greedy_network.GreedyNetwork`) with one published version of its weights, the observation statistics it
normalises with, the action transform (`shepherd.policies.transforms.ActionTransform`) and the spaces. `GreedySnapshot`
runs it with numpy, as the head's own `GreedyPolicy` does, so an action is the head's up to float rounding.
This module never imports torch; neither side unpickles anything.

The bytes are one JSON header line, then each array's raw bytes in the header's order::

    {"format": 1, "name": "3", "version": 12, "plan": {...}, "observation_space": ..., "action_space": ...,
     "scaled": false, "normalize": null | {"mean": [...], "var": [...], "epsilon": 1e-8, "clip": 10.0},
     "arrays": [["mlp_extractor.policy_net.0.weight", "<f4", [64, 4]], ...]}
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import orjson
from gymnasium import spaces

from shepherd.policies.greedy_network import GreedyNetwork, GreedyNetworkError
from shepherd.wire.spaces import SpaceError, check_action_mask, parse_space, space_to_json
from shepherd.policies.transforms import ActionTransform, normalized

FORMAT = 1
#: the element types a snapshot's arrays may have (the published weights are float32)
_DTYPES = {"<f4", "<f8"}


class SnapshotError(ValueError):
    """Bytes that are not a snapshot this module can run."""


def encode(name: str, version: int, plan: GreedyNetwork, arrays: Mapping[str, np.ndarray], observation_space: spaces.Space,
           action_space: spaces.Space, scaled: bool, moments: tuple[np.ndarray, np.ndarray] | None = None,
           epsilon: float = 1e-8, clip: float = 10.0) -> bytes:
    """A snapshot's bytes: ``plan``'s arrays from ``arrays`` (by ``state_dict`` name, published as
    ``version``), and the observations' ``(mean, var)`` with ``epsilon`` and ``clip`` when the agent
    normalises them (VecNormalize's rule: ``clip((obs - mean) / sqrt(var + epsilon), -clip, clip)``)."""
    names = plan.weight_names()
    chosen = [np.ascontiguousarray(arrays[key], dtype=np.float32) for key in names]
    normalize = None
    if moments is not None:
        mean, var = moments
        normalize = {"mean": np.asarray(mean, np.float64).tolist(), "var": np.asarray(var, np.float64).tolist(),
                     "epsilon": float(epsilon), "clip": float(clip)}
    header = {"format": FORMAT, "name": name, "version": int(version), "plan": plan.to_data(),
              "observation_space": space_to_json(observation_space), "action_space": space_to_json(action_space),
              "scaled": bool(scaled), "normalize": normalize,
              "arrays": [[key, array.dtype.str, list(array.shape)] for key, array in zip(names, chosen)]}
    return orjson.dumps(header) + b"\n" + b"".join(array.tobytes() for array in chosen)


class GreedySnapshot:
    """One published version of a greedy policy, run with numpy: `act` gives the action the client gets."""

    def __init__(self, name: str, version: int, plan: GreedyNetwork, arrays: Mapping[str, np.ndarray],
                 observation_space: spaces.Space, action_space: spaces.Space, scaled: bool,
                 normalize: Mapping[str, Any] | None = None) -> None:
        self.name = name
        self.version = version
        self.observation_space = observation_space
        self.action_space = action_space
        #: what a step's action mask is checked against (None: the policy takes none)
        self.mask_space = action_space if plan.takes_masks else None
        self._greedy = plan.bind(arrays)
        self._actions = ActionTransform(action_space, scaled)
        self._normalize = None
        if normalize is not None:
            self._normalize = (np.asarray(normalize["mean"], np.float64), np.asarray(normalize["var"], np.float64),
                               float(normalize["epsilon"]), float(normalize["clip"]))

    @classmethod
    def from_bytes(cls, data: bytes) -> GreedySnapshot:
        """Raises: SnapshotError (not a snapshot, another format, a plan or space this module cannot run)."""
        end = data.find(b"\n")
        try:
            header = orjson.loads(data[:end] if end >= 0 else b"")
            if not isinstance(header, dict) or header.get("format") != FORMAT:
                raise SnapshotError(f"not a snapshot of format {FORMAT}")
            arrays: dict[str, np.ndarray] = {}
            position = end + 1
            for key, dtype, shape in header["arrays"]:
                if dtype not in _DTYPES:
                    raise SnapshotError(f"array {key!r} has element type {dtype!r}")
                count = int(np.prod(shape, dtype=np.int64))
                size = count * np.dtype(dtype).itemsize
                if position + size > len(data):
                    raise SnapshotError("the arrays are cut off")
                arrays[key] = np.frombuffer(data, dtype=dtype, count=count, offset=position).reshape(shape)
                position += size
            return cls(str(header["name"]), int(header["version"]), GreedyNetwork.from_data(header["plan"]), arrays,
                       parse_space(header["observation_space"], "observation_space"),
                       parse_space(header["action_space"], "action_space"), bool(header["scaled"]),
                       header.get("normalize"))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as error:
            if isinstance(error, SnapshotError):
                raise
            kind = "plan" if isinstance(error, GreedyNetworkError) else "space" if isinstance(error, SpaceError) else "header"
            raise SnapshotError(f"a snapshot's {kind} is not valid: {error}") from None

    def act(self, obs: Any, mask: Any = None) -> Any:
        """The action (in the action space, before its JSON form) for one checked observation, under its
        checked action mask (None: every action allowed)."""
        return self.act_batch([obs], None if mask is None else [mask])[0]

    def act_batch(self, observations: Sequence[Any], masks: Sequence[Any] | None = None) -> Any:
        """The actions for a batch of checked observations (a vector step's, in env order), under their
        checked action masks (None: every action allowed), with one pass of the policy."""
        batch = np.asarray(observations, dtype=np.float32)
        if self._normalize is not None:
            mean, var, epsilon, clip = self._normalize
            batch = normalized(batch, mean, var, epsilon, clip)
        rows = None if masks is None else np.asarray(masks, dtype=bool)
        return self._actions.to_env(self._greedy(batch, rows))

    def check_mask(self, value: Any, mask_space: Any, where: str = "action_mask") -> np.ndarray:
        """`shepherd.wire.parse_step`'s mask rule for this policy (SpaceError when it takes none)."""
        if mask_space is None:
            raise SpaceError("this agent's algorithm takes no 'action_mask'")
        return check_action_mask(mask_space, value, where)
