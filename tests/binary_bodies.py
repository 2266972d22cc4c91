"""Request bodies in both encodings of the client protocol (docs/protocol.md, "Binary tensors"): all JSON, or
JSON with every array of numbers in it sent as a binary tensor (`shepherd.client.tensors.encode`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from shepherd.client.tensors import HEADER, encode

#: the encodings a test of bad bodies runs through
ENCODINGS = ("json", "binary")


def as_tensors(value: Any) -> Any:
    """``value`` with every list that numpy reads as an array of numbers or booleans (the largest such lists) as
    that array: what a client sending binary tensors would send."""
    if isinstance(value, dict):
        return {key: as_tensors(item) for key, item in value.items()}
    if isinstance(value, list):
        try:
            array = np.array(value)
        except (ValueError, OverflowError):
            array = None
        if array is not None and array.dtype.kind in "biuf" and array.size:
            return array
        return [as_tensors(item) for item in value]
    return value


def request(body: Any, encoding: str) -> dict[str, Any]:
    """The keyword arguments of an aiohttp client's ``post`` sending ``body`` in ``encoding``."""
    if encoding == "json":
        return {"json": body}
    data, length = encode(as_tensors(body), allow_nan=True)  # as aiohttp's json= writes them
    return {"data": data, "headers": {HEADER: str(length), "Content-Type": "application/octet-stream"}}


def binary_parts(body: Any) -> tuple[dict[str, Any], bytes]:
    """``body``'s binary form split: its JSON (with the tensors' descriptions) and the bytes after it."""
    import json

    data, length = encode(as_tensors(body))
    return json.loads(data[:length]), data[length:]
