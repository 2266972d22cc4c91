"""An image agent's greedy snapshot: its greedy ONNX file, run with onnxruntime by a front end.

A front end answers evaluate-mode steps from a snapshot of the session's greedy policy
(`shepherd.front.snapshot_cache`). A policy numpy can run (an MLP) comes as `shepherd.policies.greedy_snapshot`
bytes; an image agent's has convolutions, which that plan has no step for, so the head sends instead the
agent's greedy file, as ``run.py agents export --format onnx`` writes it (docs/export.md), built by its learner
once per policy version (`shepherd.agents.export.behaviour.GREEDY_FILE`), and the front end runs it as the
deploy server does (`shepherd.policies.onnx.Policy`). The actions are the server's deterministic ones
(``tests/integration/test_onnx_snapshots.py``). Versions, refreshes and the endpoint are the numpy snapshot's.

The bytes are one JSON header line, then the ONNX file::

    {"format": 1, "kind": "onnx", "name": "3", "version": 12}

This module never imports torch.
"""

from __future__ import annotations

from typing import Any, Sequence, Union

import numpy as np
import orjson

from shepherd.policies.greedy_snapshot import FORMAT, GreedySnapshot, SnapshotError
from shepherd.policies.onnx import Policy, PolicyError
from shepherd.wire.spaces import SpaceError, check_action_mask

#: the header's ``kind`` of a snapshot that is an ONNX file (a numpy snapshot's header has none)
KIND = "onnx"


def encode(name: str, version: int, data: bytes) -> bytes:
    """A snapshot's bytes: the greedy ONNX file ``data`` of policy ``version``, named ``name``."""
    return orjson.dumps({"format": FORMAT, "kind": KIND, "name": name, "version": int(version)}) + b"\n" + data


class OnnxSnapshot:
    """One version of a greedy policy file, run with onnxruntime: `act` gives the action the client gets (the
    same interface as `GreedySnapshot`)."""

    def __init__(self, name: str, version: int, policy: Policy) -> None:
        self.name = name
        self.version = version
        self.policy = policy
        self.observation_space = policy.observation_space
        self.action_space = policy.action_space
        #: what a step's action mask is checked against (None: the policy takes none)
        self.mask_space = policy.action_space if policy.takes_masks else None

    @classmethod
    def from_bytes(cls, data: bytes) -> OnnxSnapshot:
        """Raises: SnapshotError (not an ONNX snapshot, or a file `Policy` refuses)."""
        end = data.find(b"\n")
        try:
            header = orjson.loads(data[:end] if end >= 0 else b"")
            if not isinstance(header, dict) or header.get("format") != FORMAT or header.get("kind") != KIND:
                raise SnapshotError(f"not an ONNX snapshot of format {FORMAT}")
            name, version = str(header["name"]), int(header["version"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as error:
            if isinstance(error, SnapshotError):
                raise
            raise SnapshotError(f"an ONNX snapshot's header is not valid: {error}") from None
        try:
            policy = Policy.from_bytes(data[end + 1:], f"snapshot {name}")
        except PolicyError as error:
            raise SnapshotError(str(error)) from None
        return cls(name, version, policy)

    def act(self, obs: Any, mask: Any = None) -> Any:
        """The action for one checked observation, under its checked action mask (None: all allowed)."""
        return self.act_batch([obs], None if mask is None else [mask])[0]

    def act_batch(self, observations: Sequence[Any], masks: Sequence[Any] | None = None) -> Any:
        """The actions (rows) for a batch of checked observations, in one run of the file."""
        return self.policy.run(observations, None if masks is None else [np.asarray(mask, bool) for mask in masks])

    def check_mask(self, value: Any, mask_space: Any, where: str = "action_mask") -> np.ndarray:
        """`shepherd.wire.parse_step`'s mask rule for this policy (SpaceError when it takes none)."""
        if mask_space is None:
            raise SpaceError("this agent's algorithm takes no 'action_mask'")
        return check_action_mask(mask_space, value, where)


#: a front end's snapshot of either kind
Snapshot = Union[GreedySnapshot, OnnxSnapshot]


def snapshot_from_bytes(data: bytes) -> Snapshot:
    """A snapshot of either kind from the head's bytes. Raises: SnapshotError."""
    end = data.find(b"\n")
    try:
        header = orjson.loads(data[:end] if end >= 0 else b"")
    except orjson.JSONDecodeError:
        raise SnapshotError("a snapshot's header is not JSON") from None
    if isinstance(header, dict) and header.get("kind") == KIND:
        return OnnxSnapshot.from_bytes(data)
    return GreedySnapshot.from_bytes(data)
