"""The batch format between the front ends and the head (``POST /internal/steps``): length-prefixed frames,
so a client's body travels as the bytes it sent (never parsed, never re-encoded) and answers can be read one
by one as the head sends them. orjson only: the head (``shepherd/http/internal.py``) and the front ends
(``shepherd/front/``) both import it.

A request body is one frame per item: a header line ``{"op": "login"|"step"|"logout"|"greedy", "address":
"...", "length": N}`` (with ``"json": J`` when the client's body is JSON followed by binary tensors, its
``Inference-Header-Content-Length``) then the N bytes of the client's body (of a ``greedy`` item: the front end's record of a
step it answered from its snapshot, `shepherd.wire.GreedyStep` or `GreedyVectorStep`). The reply streams one
frame per item, in the order the answers are ready: ``{"item": I, "status": S, "retry_after": "5" or null,
"length": N}`` then the N bytes of the JSON body the public route would have sent. An answer about a session
whose steps a front end may answer itself adds ``"snapshot": NAME, "version": V`` (the snapshot to fetch,
`SNAPSHOT_PATH`, and its learner's policy version now), and ``"n_envs": N`` for a vector session; a ``greedy``
item the head will not record (the session is no longer served that way) is answered `NOT_HERE`, and the front
end sends the client's step again as a ``step`` item.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

CONTENT_TYPE = "application/x-shepherd-frames"
#: the batch endpoint, on the head's private loopback port only
INTERNAL_PATH = "/internal/steps"
#: a snapshot of a session's greedy policy (``GET`` with ``name`` and ``newer``), on the same private port
SNAPSHOT_PATH = "/internal/snapshot"
#: the head's private endpoints, never reachable through a front end
INTERNAL_PATHS = frozenset({INTERNAL_PATH, SNAPSHOT_PATH})
#: a ``greedy`` item's status when the head will not record it (421 Misdirected Request; never sent to a client)
NOT_HERE = 421
#: the per-run token a front end sends: on the batch endpoint, and on the requests it forwards (whose
#: client address it vouches for in `ADDRESS_HEADER`)
TOKEN_HEADER = "X-Shepherd-Internal-Token"
ADDRESS_HEADER = "X-Shepherd-Client-Address"
#: on every reply of a front end: its process id
FRONT_END_HEADER = "X-Shepherd-Front-End"
OPERATIONS = ("login", "step", "logout", "greedy")
#: the most items of one batch, and the most bytes of an item's header line
MAX_ITEMS = 256
MAX_HEADER_BYTES = 512


class FrameError(ValueError):
    """A batch body or reply that is not a sequence of well-formed frames."""


@dataclass(frozen=True)
class Item:
    """One client operation of a batch: which, from which client address, and the client's body."""

    op: str
    address: str
    body: bytes
    json_length: int | None = None  # the body's Inference-Header-Content-Length (binary tensors follow its JSON)


def frame(header: dict[str, Any], body: bytes) -> bytes:
    """One frame: the header line with the body's ``length``, then the body."""
    return orjson.dumps({**header, "length": len(body)}) + b"\n" + body


def _header(line: bytes) -> dict[str, Any]:
    try:
        header = orjson.loads(line)
    except orjson.JSONDecodeError:
        raise FrameError("a frame's header is not JSON") from None
    if not isinstance(header, dict) or not isinstance(header.get("length"), int) or header["length"] < 0:
        raise FrameError("a frame's header must be an object with a length")
    return header


def encode_items(items: list[Item]) -> bytes:
    return b"".join(frame({"op": item.op, "address": item.address}
                          | ({} if item.json_length is None else {"json": item.json_length}), item.body)
                    for item in items)


def decode_items(data: bytes) -> list[Item]:
    """A batch body's items. Raises FrameError."""
    items: list[Item] = []
    position = 0
    while position < len(data):
        end = data.find(b"\n", position, position + MAX_HEADER_BYTES)
        if end < 0:
            raise FrameError("a frame's header line is missing or too long")
        header = _header(data[position:end])
        op, address, json_length = header.get("op"), header.get("address"), header.get("json")
        if op not in OPERATIONS or not isinstance(address, str):
            raise FrameError(f"a frame's op must be one of {', '.join(OPERATIONS)}, with an address")
        if json_length is not None and (type(json_length) is not int or json_length < 0):
            raise FrameError("a frame's json is the length of its body's JSON")
        start, position = end + 1, end + 1 + header["length"]
        if position > len(data):
            raise FrameError("a frame's body is cut off")
        items.append(Item(op, address, data[start:position], json_length))
        if len(items) > MAX_ITEMS:
            raise FrameError(f"a batch holds at most {MAX_ITEMS} items")
    if not items:
        raise FrameError("a batch holds at least one item")
    return items


@dataclass(frozen=True)
class SnapshotNote:
    """An answer's note that its session's steps may be answered from a snapshot: its name, and the policy
    version its learner has now (a front end holding an older one fetches it anew)."""

    name: str
    version: int
    n_envs: int | None = None  # the session's envs: a vector session's steps are lists, one item per env


def answer_frame(item: int, status: int, body: bytes, retry_after: str | None,
                 note: SnapshotNote | None = None) -> bytes:
    header: dict[str, Any] = {"item": item, "status": status, "retry_after": retry_after}
    if note is not None:
        header["snapshot"], header["version"] = note.name, note.version
        if note.n_envs is not None:
            header["n_envs"] = note.n_envs
    return frame(header, body)


def answer_header(line: bytes) -> tuple[int, int, str | None, int, SnapshotNote | None]:
    """An answer frame's (item, status, retry_after, length, snapshot note or None). Raises FrameError."""
    header = _header(line)
    item, status, retry_after = header.get("item"), header.get("status"), header.get("retry_after")
    if not isinstance(item, int) or not isinstance(status, int) or not isinstance(retry_after, (str, type(None))):
        raise FrameError("an answer's header needs its item, status and retry_after")
    name, version, n_envs = header.get("snapshot"), header.get("version"), header.get("n_envs")
    note = (SnapshotNote(name, version, n_envs if isinstance(n_envs, int) else None)
            if isinstance(name, str) and isinstance(version, int) else None)
    return item, status, retry_after, header["length"], note
