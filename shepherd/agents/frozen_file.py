"""A frozen policy from a behaviour file (issue 46): a self-play snapshot of an agent without a numpy greedy copy
(images through a CNN, a network over the numpy copy's size), played by onnxruntime on the head.

The file is the agent's own behaviour policy file of one version (`shepherd.agents.export.behaviour`, as a
client acting at the client runs it): ``train`` draws each action from the policy's distribution with uniform
noise (drawn here from the opponent's generator: self-play's ``opponent_actions: sample``), ``evaluate`` takes
its greedy action (``greedy``). It normalises observations with the statistics of its version itself, so a
snapshot restored from a checkpoint plays exactly as it did (a numpy snapshot takes its agent's statistics of the
restart). What `GreedyPolicy.act` answers, it answers: the env's action and the version that chose it.

A file (an Atari-sized CNN's is ~7 MB) is kept beside the checkpoint under its content's hash, written once when
a checkpoint first refers to it, not inside every checkpoint's ``shepherd.json`` as a numpy snapshot's weights.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from shepherd.storage.files import atomic_write_bytes

logger = logging.getLogger(__name__)

_TYPES = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(uint8)": np.uint8,
          "tensor(bool)": np.bool_}


class FrozenFile:
    """One version's behaviour file, acting one observation at a time (an opponent's steps)."""

    def __init__(self, version: int, data: bytes, name: str) -> None:
        self.version = version
        self.data = data
        self.name = name
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # one observation a step: threads cost more than they give
        self._session = ort.InferenceSession(data, sess_options=options, providers=["CPUExecutionProvider"])
        info = json.loads({p.key: p.value for p in onnx.load_from_string(data).metadata_props}["shepherd"])
        self.phase = str(info["phase"])
        self.noise_size = int(info.get("noise_size", 0))
        self.mask_size = int(info.get("mask_size") or 0) if info.get("takes_masks") else 0
        self._inputs = {i.name: _TYPES.get(i.type, np.float32) for i in self._session.get_inputs()}
        self.broken = False
        self._draws = np.random.default_rng(version)  # a train file's noise when no generator is given

    def act(self, obs: Any, mask: Any = None, rng: np.random.Generator | None = None) -> tuple[Any, int] | None:
        """The env's action for ``obs`` (under its ``mask``) and this snapshot's version; None: the learner
        answers (the file failed once). A ``train`` file draws with noise from ``rng`` (else from its own
        generator, made once, not per step)."""
        if self.broken:
            return None
        feeds: dict[str, np.ndarray] = {}
        if isinstance(obs, dict):
            for key, value in obs.items():
                name = f"obs.{key}"
                feeds[name] = np.asarray(value, dtype=self._inputs.get(name, np.float32))[None]
        else:
            feeds["obs"] = np.asarray(obs, dtype=self._inputs.get("obs", np.float32))[None]
        draw = rng if rng is not None else self._draws
        feeds["noise"] = draw.random((1, self.noise_size), dtype=np.float32)  # (1, 0) for a greedy file
        if "action_mask" in self._inputs:
            feeds["action_mask"] = (np.ones((1, self.mask_size), np.bool_) if mask is None
                                    else np.asarray(mask, np.bool_).reshape(1, -1))
        try:
            action = self._session.run(["action"], feeds)[0]
        except Exception:  # noqa: BLE001 - a file's bug must cost the snapshot, not the step: the learner answers
            logger.exception("agent %s: the snapshot file of version %d failed; the learner answers instead",
                             self.name, self.version)
            self.broken = True
            return None
        return action[0], self.version

    @functools.cached_property
    def file_name(self) -> str:
        """The name it is kept under beside the checkpoint: its content's SHA-256 (written once, however many
        checkpoints refer to it; hashed once: a checkpoint, on the event loop, names every snapshot of the window,
        and an Atari-sized CNN's file of ~7 MB takes ~12 ms to hash)."""
        return hashlib.sha256(self.data).hexdigest() + ".onnx"

    def state(self) -> dict[str, Any]:
        """Its plain form for the self-play's checkpoint: the version and the file it is kept in (`keep`)."""
        return {"version": self.version, "file": self.file_name}

    def keep(self, folder: Path) -> None:
        """Write the file into ``folder`` (atomically) unless it is there: before a checkpoint refers to it."""
        path = folder / self.file_name
        if not path.exists():
            atomic_write_bytes(path, self.data)

    @classmethod
    def of_state(cls, state: dict[str, Any], folder: Path, name: str) -> FrozenFile:
        """The snapshot `state` describes, read from ``folder``.

        Raises:
            OSError: its file is gone (a checkpoint newer than the one read may have dropped it).
        """
        return cls(int(state["version"]), (folder / str(state["file"])).read_bytes(), name)
