"""An upload's columns checked whole with numpy (`shepherd.wire.experience.parse_experience`'s fast path); torch-free.

Each column (``obs``, ``sample``, ``reward``, ``terminated``, ``truncated``, and ``action_mask``: `mask_column`)
is checked at once: its nested lists flattened level by level (``chain``, every level's types and lengths by
``map``, in C), the Python types of its leaves, one ``np.array`` of the right dtype, then finiteness and
ranges vectorised; a ``Dict`` space's observations key by key, each key's values a column. The fast path
accepts only what the per-value checker (`shepherd.wire.experience.checked_experience`) accepts, and builds
the same arrays; anything it is not sure of (a bad value, an unusual but valid one such as ``true`` in a
``Box`` observation) makes it give up (None), and the per-value checker decides and names the field and
``[t][i]``.
"""

from __future__ import annotations

from itertools import chain
from typing import Any

import numpy as np
from gymnasium import spaces

from shepherd.wire.images import is_image
from shepherd.wire.spaces import mask_groups, mask_size

_F32_MAX = float(np.finfo(np.float32).max)
#: the largest integer magnitude a float64 holds exactly (past it, a Box's int would be rounded twice)
_EXACT = float(2 ** 53)
_NUMBERS = {float, int}
_FLAGS = {bool, int}


def columns(data: dict[str, Any], observation: spaces.Space, sample: spaces.Space, n: int,
            steps: int, max_reward: float) -> dict[str, np.ndarray] | None:
    """The columns ``obs`` (T+1, N, *shape), ``sample`` (T, N, *shape), ``reward`` (T, N, float64),
    ``terminated`` and ``truncated`` (T, N, bool), as the per-value checker would build them; None when any
    of them may not pass it (it then decides)."""
    try:
        obs = _space_column(observation, data.get("obs"), steps + 1, n)
        if obs is None:
            return None
        drawn = _space_column(sample, data.get("sample"), steps, n)
        if drawn is None or (isinstance(sample, spaces.Box) and not _within(drawn, sample)):
            return None
        reward = _reward_column(data.get("reward"), steps, n, max_reward)
        terminated = _flag_column(data.get("terminated"), steps, n)
        truncated = _flag_column(data.get("truncated"), steps, n)
    except (TypeError, ValueError, OverflowError):  # a ragged column, a huge integer, a row not a list
        return None
    if reward is None or terminated is None or truncated is None:
        return None
    return {"obs": obs, "sample": drawn, "reward": reward, "terminated": terminated, "truncated": truncated}


def _leaves(rows: Any, dims: tuple[int, ...]) -> tuple[list[Any], set[type]] | None:
    """The items of nested lists of lengths ``dims`` (rows, envs, then the value's shape), flat, and their
    types; None unless every level is lists of its length."""
    if type(rows) is not list or len(rows) != dims[0]:
        return None
    items = rows
    for length in dims[1:]:
        if {*map(type, items)} != {list} or {*map(len, items)} != {length}:
            return None
        items = list(chain.from_iterable(items))
    return items, {*map(type, items)}


def _space_column(space: spaces.Space, rows: Any, count: int, n: int) -> Any:
    """``count`` rows of ``n`` values of ``space`` as one array (a ``Dict`` space's: a dict of them, in the
    space's order of keys), or None."""
    if isinstance(space, spaces.Dict):
        return _dict_column(space, rows, count, n)
    if not isinstance(space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        return None  # another kind: the per-value checker
    dims = (count, n, *(space.shape or ()))
    array = _array(rows, dims)
    if array is not None:  # a binary body's tensors
        return _image_array(array) if is_image(space) else _space_array(space, array)
    found = _leaves(rows, dims)
    if found is None:
        return None
    leaves, types = found
    if is_image(space):  # integers 0-255 only (the per-value checker names a bad one)
        pixels = np.array(leaves, dtype=np.int64).reshape(dims) if types == {int} else None
        return pixels.astype(np.uint8) if pixels is not None and ((pixels >= 0) & (pixels <= 255)).all() else None
    if isinstance(space, spaces.Box):
        if not types <= _NUMBERS:
            return None
        numbers = np.array(leaves, dtype=np.float64).reshape(dims)
        limit = _EXACT if int in types else _F32_MAX
        return numbers.astype(np.float32) if (np.abs(numbers) <= limit).all() else None  # NaN fails too
    if types != {int}:
        return None
    array = np.array(leaves, dtype=np.int64).reshape(dims)
    if isinstance(space, spaces.Discrete):
        shifted = array - int(space.start)
        return array if ((shifted >= 0) & (shifted < int(space.n))).all() else None
    upper = space.nvec if isinstance(space, spaces.MultiDiscrete) else np.full(space.shape, 2)
    return array.astype(space.dtype) if ((array >= 0) & (array < upper)).all() else None


def _array(rows: Any, dims: tuple[int, ...]) -> np.ndarray | None:
    """A binary body's column (`shepherd.wire.tensors`) as one array of shape ``dims``: a tensor of that shape, or
    lists (of lists) of tensors each of the rest of it, of one datatype; None for anything else (JSON values, or
    tensors that do not fit: `_leaves` then gives up on them too, and the per-value checker words why)."""
    if isinstance(rows, np.ndarray):
        return rows if rows.shape == dims else None
    depth, item = 0, rows
    while type(item) is list and item and depth < len(dims):
        item, depth = item[0], depth + 1
    if depth == 0 or not isinstance(item, np.ndarray):
        return None
    found = _leaves(rows, dims[:depth])
    if found is None or found[1] != {np.ndarray}:
        return None
    parts, shape = found[0], dims[depth:]
    if any(part.shape != shape or part.dtype != item.dtype for part in parts):
        return None
    return np.stack(parts).reshape(dims)


def _image_array(array: np.ndarray) -> np.ndarray | None:
    """An image's tensor as its JSON is taken: integers 0-255 only, as uint8 (so that a retry may switch
    encodings: the same pixels, the same step); None when any may not pass (the per-value checker names it)."""
    if array.dtype.kind not in "iu":
        return None
    in_range = array.dtype == np.uint8 or ((array >= 0) & (array <= 255)).all()
    return array.astype(np.uint8) if in_range else None  # a copy: a binary body's own bytes are read-only


def _space_array(space: spaces.Space, array: np.ndarray) -> np.ndarray | None:
    """`_space_column`'s rules for an array: a ``Box``'s numbers (never booleans) as float32, finite there; the
    integers of the discrete kinds within their ranges; None when any may not pass."""
    kind = array.dtype.kind
    if isinstance(space, spaces.Box):
        if kind in "iu" and array.dtype.itemsize <= 2:
            return array.astype(np.float32)  # bytes and shorts (an image's): exact and finite in float32
        if kind not in "iuf":
            return None
        numbers = array.astype(np.float64)
        limit = _EXACT if kind in "iu" else _F32_MAX
        return numbers.astype(np.float32) if (np.abs(numbers) <= limit).all() else None  # NaN fails too
    if kind not in "iu":
        return None
    values = array.astype(np.int64)
    if isinstance(space, spaces.Discrete):
        shifted = values - int(space.start)
        return values if ((shifted >= 0) & (shifted < int(space.n))).all() else None
    if not isinstance(space, (spaces.MultiDiscrete, spaces.MultiBinary)):
        return None
    upper = space.nvec if isinstance(space, spaces.MultiDiscrete) else np.full(space.shape, 2)
    return values.astype(space.dtype) if ((values >= 0) & (values < upper)).all() else None


def _dict_column(space: spaces.Dict, rows: Any, count: int, n: int) -> dict[str, Any] | None:
    """``count`` rows of ``n`` objects with exactly the keys of ``space``: each key's values as a column."""
    found = _leaves(rows, (count, n))
    if found is None or found[1] != {dict}:
        return None
    items, keys = found[0], set(space.spaces)
    if any(item.keys() != keys for item in items):
        return None
    result = {}
    for key, sub in space.spaces.items():
        values = [item[key] for item in items]
        column = _space_column(sub, [values[r * n:(r + 1) * n] for r in range(count)], count, n)
        if column is None:
            return None
        result[key] = column
    return result


def _within(drawn: np.ndarray, space: spaces.Box) -> bool:
    return bool((drawn >= space.low).all() and (drawn <= space.high).all())


def _reward_column(rows: Any, steps: int, n: int, max_reward: float) -> np.ndarray | None:
    array = _array(rows, (steps, n))
    if array is not None:
        if array.dtype.kind not in "iuf":
            return None
        reward = array.astype(np.float64)
        return reward if np.isfinite(reward).all() and (np.abs(reward) <= max_reward).all() else None
    found = _leaves(rows, (steps, n))
    if found is None or not found[1] <= _NUMBERS:
        return None
    reward = np.array(found[0], dtype=np.float64).reshape(steps, n)
    return reward if np.isfinite(reward).all() and (np.abs(reward) <= max_reward).all() else None


def _flag_column(rows: Any, steps: int, n: int) -> np.ndarray | None:
    return _flags(rows, (steps, n))


def _flags(rows: Any, dims: tuple[int, ...]) -> np.ndarray | None:
    """Nested lists of ``dims`` of booleans (or 0 and 1, as the per-value rules take them) as a bool array."""
    array = _array(rows, dims)
    if array is not None:
        if array.dtype == bool:
            return array.copy()
        return array.astype(bool) if array.dtype.kind in "iu" and ((array == 0) | (array == 1)).all() else None
    found = _leaves(rows, dims)
    if found is None or not found[1] <= _FLAGS:
        return None
    if found[1] == {bool}:
        return np.array(found[0], dtype=bool).reshape(dims)
    flags = np.array(found[0], dtype=np.int64).reshape(dims)  # OverflowError past int64: the callers give up
    return flags.astype(bool) if ((flags == 0) | (flags == 1)).all() else None


def mask_column(rows: Any, space: spaces.Space, count: int, n: int) -> np.ndarray | None:
    """``count`` rows of ``n`` action masks of the action space ``space`` as one bool array (count, n, size),
    by `shepherd.wire.spaces.check_action_mask`'s rule (booleans or 0/1, at least one choice of each
    sub-action allowed); None when any may not pass it."""
    size = mask_size(space)
    if size is None:
        return None
    try:
        flags = _flags(rows, (count, n, size))
    except OverflowError:  # an integer past int64: not a flag
        return None
    if flags is None:
        return None
    start = 0
    for width in mask_groups(space):
        if not flags[..., start:start + width].any(axis=-1).all():
            return None
        start += width
    return flags
