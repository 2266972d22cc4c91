"""Binary tensors in a request body (docs/protocol.md, "Binary tensors"), as the KServe v2 / Triton binary tensor
data extension lays them out: the JSON first, every numpy array in it replaced by ``{"datatype", "shape",
"binary_data_size"}``, the arrays' bytes after it in the order they appear, and the JSON's length in the
``Inference-Header-Content-Length`` header. Standard library only: an array is anything with numpy's
``dtype``, ``shape``, ``astype`` and ``tobytes`` (numpy is imported only by the callers that stack arrays)."""

from __future__ import annotations

import json
import math
from typing import Any

HEADER = "Inference-Header-Content-Length"
#: a client sends a session's observations as binary tensors when one observation holds more numbers than this
#: (the login reply's observation space says how many): a CartPole's 4 go as JSON, an 84x84x4 frame as bytes
BINARY_NUMBERS = 1024
#: numpy's kinds and sizes -> (the tensor's datatype, the little-endian numpy type its bytes are written in)
_BY_KIND = {("u", 1): ("UINT8", "|u1"), ("f", 4): ("FP32", "<f4"), ("f", 8): ("FP64", "<f8"), ("b", 1): ("BOOL", "|b1")}


def is_array(value: Any) -> bool:
    """Whether ``value`` is a numpy array (of at least one dimension: a scalar goes as a JSON number)."""
    return hasattr(value, "dtype") and hasattr(value, "tobytes") and bool(getattr(value, "shape", ()))


def _datatype(array: Any) -> tuple[str, str] | None:
    kind, size = array.dtype.kind, array.dtype.itemsize
    if (kind, size) in _BY_KIND:
        return _BY_KIND[(kind, size)]
    if kind in "iu":
        return "INT64", "<i8"  # other integers, widened
    if kind == "f":
        return "FP32", "<f4"  # float16
    return None  # strings, objects: as JSON


def encode(payload: Any, allow_nan: bool = False) -> tuple[bytes, int]:
    """The body of ``payload`` with every array (`is_array`) sent as a binary tensor, and the length of its JSON
    (the `HEADER`'s value). ``allow_nan``: write NaN and infinities into the JSON (which the server refuses)."""
    chunks: list[bytes] = []

    def replace(value: Any) -> Any:
        if is_array(value):
            kind = _datatype(value)
            if kind is None:
                return value.tolist()
            data = value.astype(kind[1], copy=False).tobytes()  # row-major, little-endian
            chunks.append(data)
            return {"datatype": kind[0], "shape": [int(d) for d in value.shape], "binary_data_size": len(data)}
        if isinstance(value, dict):
            return {key: replace(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [replace(item) for item in value]
        if hasattr(value, "tolist"):  # a numpy scalar
            return value.tolist()
        return value

    header = json.dumps(replace(payload), allow_nan=allow_nan).encode()
    return header + b"".join(chunks), len(header)


def decode_reply(raw: bytes, length: int) -> tuple[dict[str, Any], dict[str, bytes]]:
    """A reply in the same layout (an upload's with ``"policy"``): its JSON, and each top-level tensor's bytes by
    its key, in the order they appear. Raises ValueError when the sizes do not add up."""
    data = json.loads(raw[:length])
    tensors, offset = {}, length
    for key, value in data.items():
        if isinstance(value, dict) and "binary_data_size" in value:
            size = int(value["binary_data_size"])
            if size != math.prod(value["shape"]) or offset + size > len(raw):
                raise ValueError(f"the reply's tensor {key!r} does not fit its bytes")
            tensors[key] = raw[offset:offset + size]
            offset += size
    if offset != len(raw):
        raise ValueError("the reply has bytes after its tensors")
    return data, tensors


def observation_numbers(spec: Any) -> int:
    """How many numbers one observation of a space (its JSON spec, as a login reply gives it) holds."""
    if isinstance(spec, dict):
        return sum(observation_numbers(sub) for sub in spec.values())
    if isinstance(spec, list) and spec and isinstance(spec[0], str) and len(spec) >= 2:  # ["MultiDiscrete", ...]
        shape = spec[1]
        return math.prod(shape) if isinstance(shape, list) and spec[0] != "MultiDiscrete" else (
            len(shape) if isinstance(shape, list) else int(shape))
    if isinstance(spec, list) and spec:  # [shape, low, high]
        shape = spec[0]
        return math.prod(shape) if isinstance(shape, list) else int(shape)
    return 1
