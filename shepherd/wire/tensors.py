"""Binary tensors in the client protocol's bodies (docs/protocol.md, "Binary tensors"), as the KServe v2 / Triton
binary tensor data extension lays them out: the request header ``Inference-Header-Content-Length: N`` says that
the first N bytes of the body are its JSON, in which any array value may be replaced by ``{"datatype": D,
"shape": [...], "binary_data_size": B}``; the B bytes of each (little-endian, row-major) follow the JSON in
the order such values appear in it. `decode` turns such a body into the JSON path's structure with numpy arrays
in place of the replaced values; the parsers take arrays wherever they take lists. Torch-free."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import orjson

from shepherd.wire.steps import BadRequest

#: the request (and response) header that says where a body's JSON ends
HEADER = "Inference-Header-Content-Length"
#: a tensor's datatypes, as numpy's (little-endian)
DATATYPES: dict[str, np.dtype] = {"UINT8": np.dtype("u1"), "FP32": np.dtype("<f4"), "FP64": np.dtype("<f8"),
                                  "INT64": np.dtype("<i8"), "BOOL": np.dtype("?")}
#: the key that makes a JSON object a tensor's description, and the keys it has
SIZE_KEY = "binary_data_size"
TENSOR_KEYS = frozenset({"datatype", "shape", SIZE_KEY})
#: the most dimensions a tensor may have (numpy's limit is 64; an observation with its rows has far fewer)
MAX_DIMENSIONS = 32


def json_length(value: str | None) -> int | None:
    """The value of `HEADER` (None: absent, the body is all JSON). Raises BadRequest unless it is a
    non-negative whole number."""
    if value is None:
        return None
    text = value.strip()
    if not text.isdigit() or not text.isascii():
        raise BadRequest(f"the {HEADER} header must be the number of bytes of the body's JSON, not {value[:40]!r}")
    return int(text)


def decode(body: bytes, length: int) -> Any:
    """The JSON of ``body``'s first ``length`` bytes with every tensor description replaced by a numpy array of
    the bytes after the JSON (read-only views of ``body``; the parsers copy what they keep).

    Raises:
        BadRequest: the JSON is not valid, a description is malformed or names an unknown datatype, its size
            is not its shape's, or the bytes after the JSON are not exactly the tensors' (missing or left over).
    """
    if length > len(body):
        raise BadRequest(f"the {HEADER} header says {length} bytes of JSON, but the body has {len(body)}")
    header = body[:length]
    try:
        data = orjson.loads(header)
    except orjson.JSONDecodeError as error:
        raise BadRequest(f"the body is not valid JSON ({error}); NaN and Infinity are not JSON") from None
    reader = _Reader(body, length, header.count(SIZE_KEY.encode()))
    data = reader.walk(data)
    if reader.offset != len(body):
        raise BadRequest(f"the body has {len(body) - reader.offset} bytes after its tensors' "
                         f"{reader.offset - length}; every byte after the JSON must belong to a tensor")
    return data


class _Reader:
    """Walks the decoded JSON in document order, replacing tensor descriptions by arrays of the body's bytes."""

    def __init__(self, body: bytes, offset: int, expected: int) -> None:
        self.body = body
        self.offset = offset
        self.left = expected  # descriptions the JSON text may still hold (the key counted in it): stop at 0

    def walk(self, value: Any) -> Any:
        if self.left <= 0:
            return value
        if type(value) is dict:
            if SIZE_KEY in value:
                return self.tensor(value)
            for key, item in value.items():
                if type(item) is dict or type(item) is list:
                    value[key] = self.walk(item)
        elif type(value) is list:
            for index, item in enumerate(value):
                if type(item) is dict or type(item) is list:
                    value[index] = self.walk(item)
        return value

    def tensor(self, description: dict[str, Any]) -> np.ndarray:
        self.left -= 1
        if description.keys() != TENSOR_KEYS:
            raise BadRequest(f"a binary tensor is described by exactly {sorted(TENSOR_KEYS)}; got "
                             f"{sorted(description)[:8]}")
        name, shape, size = description["datatype"], description["shape"], description[SIZE_KEY]
        dtype = DATATYPES.get(name) if isinstance(name, str) else None
        if dtype is None:
            raise BadRequest(f"unknown tensor datatype {str(name)[:20]!r}; one of {', '.join(DATATYPES)}")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise BadRequest(f"a tensor's shape is a list of whole numbers, got {str(shape)[:40]}")
        if len(shape) > MAX_DIMENSIONS:
            raise BadRequest(f"a tensor has at most {MAX_DIMENSIONS} dimensions, not {len(shape)}")
        if type(size) is not int or size < 0:
            raise BadRequest(f"a tensor's {SIZE_KEY} is a whole number of bytes, got {str(size)[:20]}")
        count = math.prod(shape)
        if size != count * dtype.itemsize:
            raise BadRequest(f"a {name} tensor of shape {shape} has {count * dtype.itemsize} bytes, but its "
                             f"{SIZE_KEY} is {size}")
        if self.offset + size > len(self.body):
            raise BadRequest(f"the body ends {self.offset + size - len(self.body)} bytes before its tensors do: "
                             f"the tensors' bytes are missing")
        try:
            array = np.frombuffer(self.body, dtype, count, self.offset).reshape(shape)
        except ValueError as error:  # a shape numpy cannot hold (of no values: 0 x 1e9 x 1e9 is too big)
            raise BadRequest(f"a tensor of shape {str(shape)[:40]} cannot be read: {error}") from None
        self.offset += size
        if name == "BOOL" and count and array.view(np.uint8).max() > 1:
            raise BadRequest("a BOOL tensor's bytes must be 0 or 1")
        return array


def plain(value: Any) -> Any:
    """``value`` with every numpy array (nested in dicts and lists) as the JSON value it stands for: what the
    per-value checkers take to word a refusal exactly as they word the JSON body's."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if type(value) is dict:
        return {key: plain(item) for key, item in value.items()}
    if type(value) is list:
        return [plain(item) for item in value]
    return value
