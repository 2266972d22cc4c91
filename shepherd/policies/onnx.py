"""An exported policy (one ONNX file, docs/deploy.md) loaded and run in-process with onnxruntime and numpy.

    policy = Policy.load("policy.onnx")
    action = policy.act([0.01, -0.02, 0.03, 0.04])        # 1: as the server's JSON reply carries it
    actions = policy.act_batch([obs_0, obs_1, ...])       # one forward pass for all

Observations are checked as the server checks a step's (`shepherd.wire.spaces`) and actions converted to JSON as
it converts them, so an action equals the server's greedy answer to the same observation. This module never
imports torch, stable-baselines3 or the learning code: the deploy server (``shepherd/deploy``) runs on it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import onnxruntime as ort
from gymnasium import spaces

from shepherd.wire.images import is_image
from shepherd.wire.observations import Observation, check_observation, check_observations
from shepherd.wire.spaces import SpaceError, action_to_json, check_action_mask, mask_size, parse_space, space_to_json

#: the file format this reader knows (the ``"format"`` of the ``shepherd`` metadata)
FORMAT = 1
METADATA_KEY = "shepherd"
MASK_INPUT = "action_mask"
ACTION_OUTPUT = "action"

_ORT_TYPES = {np.float32: "tensor(float)", np.int64: "tensor(int64)", np.bool_: "tensor(bool)",
              np.uint8: "tensor(uint8)"}


class PolicyError(ValueError):
    """A policy file that cannot be used (missing, damaged, not a Shepherd policy), or an observation or
    action mask that does not fit the policy; the message is one line saying what and how to fix it."""


def _input_dtype(space: spaces.Space) -> type:
    """The input's element type the format gives a space: int64 for Discrete and MultiDiscrete, uint8 for
    an image, float32 for Box and MultiBinary."""
    if is_image(space):
        return np.uint8
    return np.int64 if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete)) else np.float32


def _input_spaces(space: spaces.Space) -> dict[str, spaces.Space]:
    """The model's observation inputs by name: ``observation``, or ``observation.<key>`` per Dict key."""
    if isinstance(space, spaces.Dict):
        return {f"observation.{key}": sub for key, sub in space.spaces.items()}
    return {"observation": space}


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= 300 else text[:297] + "..."


def _plain(value: Any) -> Any:
    """A numpy observation (array, scalar, or a dict or list of them) as the JSON values a client sends."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


class Policy:
    """A greedy policy exported by Shepherd: the server's evaluate-mode answer to an observation, without
    the server. Build it with `Policy.load`; it is safe to call from one thread at a time per instance
    (onnxruntime's session itself is thread-safe)."""

    def __init__(self, session: ort.InferenceSession, metadata: dict[str, Any], source: str) -> None:
        self._session = session
        self._metadata = metadata
        self._source = source
        try:
            self._observation_space = parse_space(metadata.get("observation_space"), "observation_space")
            self._action_space = parse_space(metadata.get("action_space"), "action_space")
        except SpaceError as error:
            raise PolicyError(f"{source}: its metadata's spaces are invalid: {error}") from None
        if isinstance(self._action_space, spaces.Dict):
            raise PolicyError(f"{source}: its action space is a Dict, which no Shepherd agent has")
        self._inputs = _input_spaces(self._observation_space)
        self._takes_masks = bool(metadata.get("takes_masks", False))
        self._mask_size = mask_size(self._action_space) if self._takes_masks else None
        if self._takes_masks and self._mask_size is None:
            raise PolicyError(f"{source}: it takes action masks but its action space "
                              f"{space_to_json(self._action_space)} has none")
        if self._takes_masks and metadata.get("mask_size") not in (None, self._mask_size):
            raise PolicyError(f"{source}: its mask_size {metadata.get('mask_size')} does not fit its action space "
                              f"{space_to_json(self._action_space)} ({self._mask_size} booleans)")
        self._check_graph()

    # -- loading ---------------------------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | Path, threads: int = 1) -> Policy:
        """Read an exported policy file. ``threads``: onnxruntime's intra-op threads (1: a small policy runs
        fastest on one, and leaves the machine's cores to the caller).

        Raises:
            PolicyError: no such file, a damaged file (not ONNX), an ONNX model that is not a Shepherd policy
                (no ``shepherd`` metadata, an unknown format, inputs or outputs other than the format's).
        """
        path = Path(path)
        try:
            data = path.read_bytes()
        except OSError as error:
            raise PolicyError(f"cannot read the policy file {path}: {error.strerror or error}") from None
        return cls.from_bytes(data, str(path), threads)

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "the policy", threads: int = 1) -> Policy:
        """`load` from the file's bytes; ``source`` names it in errors. Raises PolicyError as `load` does."""
        options = ort.SessionOptions()
        options.intra_op_num_threads = max(1, threads)
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3  # onnxruntime's warnings would go to stderr past the logging setup
        try:
            session = ort.InferenceSession(data, sess_options=options, providers=["CPUExecutionProvider"])
        except Exception as error:  # noqa: BLE001 - onnxruntime raises its own pybind types, not exported stably
            kind = type(error).__name__
            if kind == "InvalidProtobuf" or "protobuf" in str(error).lower():  # (an empty file: "no graph ... protobuf")
                raise PolicyError(f"{source} is damaged: it is not a valid ONNX model ({_one_line(error)})") from None
            raise PolicyError(f"{source}: onnxruntime cannot load it: {_one_line(error)}") from None
        custom = session.get_modelmeta().custom_metadata_map
        if METADATA_KEY not in custom:
            raise PolicyError(f"{source} is an ONNX model but not a Shepherd policy (it has no '{METADATA_KEY}' "
                              "metadata); export one with `run.py agents export AGENT --format onnx`")
        try:
            metadata = json.loads(custom[METADATA_KEY])
        except ValueError:
            raise PolicyError(f"{source} is not a Shepherd policy: its '{METADATA_KEY}' metadata is not JSON") from None
        if not isinstance(metadata, dict):
            raise PolicyError(f"{source} is not a Shepherd policy: its '{METADATA_KEY}' metadata is not an object")
        if metadata.get("format") != FORMAT:
            raise PolicyError(f"{source} is not a Shepherd policy this version reads: its format is "
                              f"{metadata.get('format')!r}, this Shepherd reads format {FORMAT}")
        return cls(session, metadata, source)

    def _check_graph(self) -> None:
        """The model's inputs and output are the format's for the metadata's spaces."""
        inputs = {node.name: node for node in self._session.get_inputs()}
        expected = dict(self._inputs)
        names = set(expected) | ({MASK_INPUT} if self._takes_masks else set())
        if set(inputs) != names:
            raise PolicyError(f"{self._source} does not follow the policy format: its inputs are {sorted(inputs)}, "
                              f"its spaces ask for {sorted(names)}")
        for name, space in expected.items():
            want = _ORT_TYPES[_input_dtype(space)]
            if inputs[name].type != want:
                raise PolicyError(f"{self._source} does not follow the policy format: input '{name}' is "
                                  f"{inputs[name].type}, the format gives {want}")
        if self._takes_masks and inputs[MASK_INPUT].type != "tensor(bool)":
            raise PolicyError(f"{self._source} does not follow the policy format: input '{MASK_INPUT}' is "
                              f"{inputs[MASK_INPUT].type}, the format gives tensor(bool)")
        outputs = [node.name for node in self._session.get_outputs()]
        if ACTION_OUTPUT not in outputs:
            raise PolicyError(f"{self._source} does not follow the policy format: it has no output "
                              f"'{ACTION_OUTPUT}' (outputs: {outputs})")
        self._probe()

    def _probe(self) -> None:
        """Run the model once on observations sampled from the metadata's observation space: it must take
        them and answer a row per observation that fits the metadata's action space (a Box action's shape;
        a discrete action's range too), so that a file whose metadata disagrees with its graph is refused at
        load, not answered 500 at every step."""
        rows = 2
        space = self._observation_space
        space.seed(0)
        try:
            observations = check_observations(space, _plain([space.sample() for _ in range(rows)]), "observations")
        except SpaceError:  # a space whose samples the checks refuse (they are the server's rules): no probe
            return
        try:
            actions = np.asarray(self.run(observations))
        except Exception as error:  # noqa: BLE001 - onnxruntime's pybind errors are not exported stably
            raise PolicyError(f"{self._source}: its graph does not take observations of its metadata's observation "
                              f"space {_space_text(space)}: {_one_line(error)}") from None
        action_space = self._action_space
        shape = tuple(action_space.shape or ())
        fits = actions.ndim >= 1 and actions.shape[0] == rows and (
            int(np.prod(actions.shape[1:], dtype=np.int64)) == int(np.prod(shape, dtype=np.int64)))
        if fits and isinstance(action_space, (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
            fits = all(action_space.contains(np.asarray(action, dtype=action_space.dtype).reshape(shape))
                       for action in actions)
        if not fits:
            raise PolicyError(f"{self._source}: its graph's actions (shape {list(actions.shape)} for {rows} "
                              f"observations) do not fit its metadata's action space {_space_text(action_space)}")

    # -- what it is ------------------------------------------------------------------------------------------

    @property
    def agent(self) -> str:
        """The name of the agent it was exported from."""
        return str(self._metadata.get("agent", ""))

    @property
    def algorithm(self) -> str:
        return str(self._metadata.get("algorithm", ""))

    @property
    def observation_space(self) -> spaces.Space:
        return self._observation_space

    @property
    def action_space(self) -> spaces.Space:
        return self._action_space

    @property
    def policy_version(self) -> int:
        """The policy version of the exported weights (as the learning server's replies number them)."""
        version = self._metadata.get("policy_version", 0)
        return version if isinstance(version, int) and not isinstance(version, bool) else 0

    @property
    def takes_masks(self) -> bool:
        return self._takes_masks

    @property
    def mask_size(self) -> int | None:
        """How many booleans an action mask has (None: the policy takes none)."""
        return self._mask_size

    @property
    def filters(self) -> Any:
        """The agent's observation filter settings and statistics, as exported (None: no filter); they are
        applied inside the model already."""
        return self._metadata.get("filters")

    @property
    def metadata(self) -> dict[str, Any]:
        """The whole ``shepherd`` metadata of the file (a copy)."""
        return json.loads(json.dumps(self._metadata))

    def __repr__(self) -> str:
        return (f"Policy(agent={self.agent!r}, algorithm={self.algorithm!r}, "
                f"observation_space={space_to_json(self._observation_space)!r}, "
                f"action_space={space_to_json(self._action_space)!r}, policy_version={self.policy_version})")

    # -- acting ----------------------------------------------------------------------------------------------

    def act(self, observation: Any, mask: Any = None) -> Any:
        """The greedy action for one observation, as a client sends it (JSON values, or numpy), as the
        server's JSON reply carries it: an int for Discrete, (nested) lists for the others.

        Raises:
            PolicyError: the observation does not fit the observation space, or the mask does not fit (or
                the policy takes no masks).
        """
        checked = self._check(observation, "observation")
        masks = None if mask is None else [self._check_mask(mask, "mask")]
        return action_to_json(self._action_space, self._finite(self.run([checked], masks))[0])

    def _finite(self, actions: np.ndarray) -> np.ndarray:
        """``actions``, each a number (an observation far outside what the policy learned from can overflow its
        network: a NaN action would be sent as null, outside the action space).

        Raises:
            PolicyError: naming the first observation whose action is NaN or infinite.
        """
        if np.issubdtype(actions.dtype, np.floating):
            bad = ~np.isfinite(actions.reshape(len(actions), -1)).all(axis=1)
            if bad.any():
                raise PolicyError(f"observations[{int(np.argmax(bad))}] makes the policy's action NaN or infinite "
                                  "(its values are far outside what the policy learned from)")
        return actions

    def act_batch(self, observations: Sequence[Any], masks: Sequence[Any] | None = None) -> list[Any]:
        """`act` for many observations in one forward pass (``masks``: one per observation, or None).

        Raises:
            PolicyError: an observation or mask does not fit; the message names its index.
        """
        if isinstance(observations, np.ndarray) and not isinstance(self._observation_space, spaces.Dict):
            plain = observations if observations.ndim else observations.tolist()
        elif isinstance(observations, (list, tuple)):  # JSON lists and arrays as they are (arrays checked as arrays)
            plain = list(observations)
        else:
            raise PolicyError("act_batch takes a list of observations (one per row); use act for one")
        try:
            checked = check_observations(self._observation_space, plain, "observations")
        except SpaceError:
            try:  # numpy inside the rows (scalars, dicts of arrays): convert them all, then check again
                checked = check_observations(self._observation_space, _plain(plain), "observations")
            except SpaceError as error:
                raise PolicyError(self._misfit(error)) from None
        checked_masks = None
        if masks is not None:
            if len(masks) != len(plain):
                raise PolicyError(f"masks has {len(masks)} items and observations {len(plain)}: one mask per "
                                  "observation (or none)")
            checked_masks = [self._check_mask(mask, f"masks[{i}]") for i, mask in enumerate(masks)]
        actions = self._finite(self.run(checked, checked_masks))
        if isinstance(self._action_space, spaces.Discrete):  # action_to_json's ints, without a call per row
            return np.asarray(actions).reshape(-1).astype(np.int64).tolist()
        return [action_to_json(self._action_space, action) for action in actions]

    def run(self, observations: Sequence[Observation], masks: Sequence[np.ndarray] | None = None) -> np.ndarray:
        """The model on observations already checked by `shepherd.wire.spaces` (as the server's parser gives
        them) and masks already checked; returns the ``action`` output, one row per observation."""
        feeds: dict[str, np.ndarray] = {}
        for name, space in self._inputs.items():
            key = name.partition(".")[2]
            rows = [value[key] for value in observations] if key else observations  # type: ignore[index]
            shape: tuple[int, ...] = space.shape or ()
            feeds[name] = np.asarray(rows, dtype=_input_dtype(space)).reshape((len(rows), *shape))
        if self._mask_size is not None:
            rows_shape = (len(observations), self._mask_size)
            feeds[MASK_INPUT] = (np.asarray(masks, dtype=np.bool_).reshape(rows_shape) if masks is not None
                                 else np.ones(rows_shape, dtype=np.bool_))
        return self._session.run([ACTION_OUTPUT], feeds)[0]

    def _check(self, observation: Any, where: str) -> Observation:
        if isinstance(observation, np.ndarray) and observation.ndim:  # an image stays an array: checked as one
            try:
                return check_observation(self._observation_space, observation, where)
            except SpaceError:
                pass  # checked again as plain values (the error then names what is wrong as for JSON)
        try:
            return check_observation(self._observation_space, _plain(observation), where)
        except SpaceError as error:
            raise PolicyError(self._misfit(error)) from None

    def _misfit(self, error: SpaceError) -> str:
        return f"{error}; the policy's observation space is {_space_text(self._observation_space)}"

    def _check_mask(self, mask: Any, where: str) -> np.ndarray:
        if self._mask_size is None:
            raise PolicyError(f"this policy ({self.algorithm}) takes no action mask; pass none")
        try:
            return check_action_mask(self._action_space, _plain(mask), where)
        except SpaceError as error:
            raise PolicyError(str(error)) from None


def _space_text(space: spaces.Space) -> str:
    return json.dumps(space_to_json(space))
