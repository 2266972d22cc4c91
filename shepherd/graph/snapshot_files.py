"""The files of self-play's numpy snapshots (`shepherd.graph.selfplay`): a snapshot's weights kept beside the
checkpoint as a file named by its content (`WeightsFile`), and the older form that held them in the checkpoint
itself, base64 in JSON (`decoded`, read when a checkpoint of that form is restored)."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from shepherd.agents.greedy_policy import GreedyPolicy
from shepherd.storage.files import atomic_write_bytes


class WeightsFile:
    """A numpy snapshot's weights as a file beside the checkpoint, named by its content's SHA-256 as a behaviour
    file's are (`FrozenFile`): written once however many checkpoints name it, so that a checkpoint holds names,
    not the window's weights (a window of 200 snapshots of a 256 x 256 MLP is ~60 MB). The format is a line of
    JSON (each array's name, dtype and shape, in order) and the arrays' bytes after it: no pickles, and the same
    bytes for the same weights."""

    def __init__(self, version: int, data: bytes) -> None:
        self.version, self.data = version, data
        self.file_name = hashlib.sha256(data).hexdigest() + ".weights"

    @classmethod
    def of(cls, version: int, arrays: dict[str, Any]) -> WeightsFile:
        ordered = {name: np.ascontiguousarray(array) for name, array in sorted(arrays.items())}
        header = [[name, array.dtype.str, list(array.shape)] for name, array in ordered.items()]
        return cls(version, json.dumps(header).encode() + b"\n" + b"".join(a.tobytes() for a in ordered.values()))

    @classmethod
    def read(cls, version: int, path: Path) -> WeightsFile:
        """The file at ``path``.

        Raises:
            OSError: it cannot be read. ValueError: its bytes are not its name's, or not weights.
        """
        file = cls(version, path.read_bytes())
        if file.file_name != path.name:
            raise ValueError(f"{path.name} holds other bytes than its name says")
        file.arrays()
        return file

    def arrays(self) -> dict[str, np.ndarray]:
        header, _, body = self.data.partition(b"\n")
        arrays, offset = {}, 0
        for name, dtype, shape in json.loads(header):
            array = np.frombuffer(body, dtype=np.dtype(dtype), count=int(np.prod(shape, dtype=np.int64)), offset=offset)
            arrays[name] = array.reshape(shape).copy()
            offset += array.nbytes
        if offset != len(body):
            raise ValueError("weights of other sizes than the header says")
        return arrays

    def keep(self, folder: Path) -> None:
        """Write the file into ``folder`` (atomically) unless it is there: before a checkpoint names it. Its bytes
        are then forgotten (the pool's snapshot holds the weights)."""
        path = folder / self.file_name
        if not path.exists():
            atomic_write_bytes(path, self.data)
        self.data = b""

    def state(self) -> dict[str, Any]:
        return {"version": self.version, "weights": self.file_name}


def weights_of(policy: GreedyPolicy) -> Any:
    """The arrays of a numpy snapshot's weights (its frozen source's latest)."""
    weights = policy.source.latest_weights()
    assert weights is not None, "a snapshot without weights"
    return weights.arrays


def decoded(arrays: dict[str, Any]) -> dict[str, np.ndarray]:
    """A snapshot's arrays as an older checkpoint held them (each name: its dtype, shape and base64 bytes)."""
    return {name: np.frombuffer(base64.b64decode(item["data"]), dtype=np.dtype(item["dtype"]))
            .reshape(item["shape"]).copy() for name, item in arrays.items()}
