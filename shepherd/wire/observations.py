"""Observations checked against their space (`shepherd.wire.spaces`) and converted to what a learner takes: a
step's, a vector step's rows (in one array where they can be, noting whether a number is beyond
`SUSPECT_MAGNITUDE` in the same pass), images, integers; refused with `SpaceError` naming where."""

from __future__ import annotations

from typing import Any, NamedTuple, Union

import numpy as np
from gymnasium import spaces

from shepherd.wire.images import ImageBox
from shepherd.wire.spaces import SpaceError

Observation = Union[int, np.ndarray, dict[str, Any]]


def check_observation(space: spaces.Space, value: Any, where: str = "obs") -> Observation:
    """Check a JSON observation against its space and convert it to what the learner takes.

    Shape, numeric type and finiteness are checked; bounds are not (client-declared bounds are often
    loose, and a learner copes with values outside them).

    Raises:
        SpaceError: the observation does not fit the space.
    """
    if isinstance(space, ImageBox):  # nested lists of integers, or a binary body's UINT8 tensor
        return _check_image(space, value, where)
    if isinstance(value, np.ndarray):  # a binary body's tensor (`shepherd.wire.tensors`)
        if isinstance(space, spaces.Box) and value.shape == space.shape and value.dtype.kind in "iuf":
            return _box_array(value, where, space)
        value = value.tolist()  # anything else is checked, and refused, as its JSON would be
    if isinstance(space, spaces.Box):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = [value]
        if len(space.shape) == 1 and type(value) is list and len(value) == space.shape[0] and _flat_numbers(value):
            # the common case (a vector of JSON numbers, which are finite): no nested checks, no errstate
            return np.array(value, dtype=np.float32)
        if not isinstance(value, list):
            raise SpaceError(f"{where} must be a list of numbers of shape {list(space.shape)}")
        raw = _array(value, where, f"shape {list(space.shape)}")
        if raw.dtype.kind not in "iuf":
            raise SpaceError(f"{where} must contain only numbers (shape {list(space.shape)})")
        if raw.shape != space.shape:
            raise SpaceError(f"{where} has shape {list(raw.shape)}, expected {list(space.shape)}")
        return _box_array(raw, where, space)
    if isinstance(space, spaces.Discrete):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):  # (a binary body's
            raise SpaceError(f"{where} must be an integer in [0, {space.n - 1}]")  # rows are numpy integers)
        if not 0 <= value - int(space.start) < space.n:
            raise SpaceError(f"{where} is {value}, outside [0, {space.n - 1}]")
        return np.asarray(value, dtype=np.int64)[()]  # a numpy integer, as SB3's policies take it
    if isinstance(space, (spaces.MultiDiscrete, spaces.MultiBinary)):
        return _check_integers(space, value, where)
    if isinstance(space, spaces.Dict):
        if not isinstance(value, dict):
            raise SpaceError(f"{where} must be an object with keys {sorted(space.spaces)}")
        missing = sorted(set(space.spaces) - set(value))
        extra = sorted(set(value) - set(space.spaces))
        if missing or extra:
            raise SpaceError(f"{where} keys do not match the space: missing {missing}, unknown {extra}")
        return {key: check_observation(sub, value[key], f"{where}.{key}") for key, sub in space.spaces.items()}
    raise SpaceError(f"{where}: observation space {space} is not supported")


def _box_array(raw: np.ndarray, where: str, space: spaces.Box) -> np.ndarray:
    """Numbers of a box's shape as float32 (a copy), refused when one is not finite there."""
    if raw.dtype.kind in "iu" and raw.dtype.itemsize <= 2:
        return raw.astype(np.float32)  # bytes and shorts (an image's): always finite in float32
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow becomes inf, refused just below
        arr = raw.astype(np.float32)
    if not np.isfinite(arr).all():
        raise SpaceError(f"{where} contains NaN or infinity, or a number too large for float32")
    return arr


class CheckedRows(NamedTuple):
    """A vector step's observations checked (`check_observation_rows`): one per env, and whether one of them
    holds a number beyond `SUSPECT_MAGNITUDE`, found in the same pass."""

    rows: list[Observation]
    suspect: bool


def check_observations(space: spaces.Space, values: Any, where: str = "obs") -> list[Observation]:
    """Check a list of JSON observations (a vector step's) against their space, as `check_observation`
    checks one; an error names the index (``obs[3] has shape ...``).

    Raises:
        SpaceError: an observation does not fit the space, or ``values`` is not a list.
    """
    return check_observation_rows(space, values, where).rows


def check_observation_rows(space: spaces.Space, values: Any, where: str = "obs") -> CheckedRows:
    """`check_observations`, telling also whether a row is `suspect`: on the one array a box's rows are
    checked in (one numpy pass, where asking each row costs ~1 us per env), else row by row."""
    if isinstance(values, np.ndarray):  # a binary body's tensor: one observation per row
        if isinstance(space, ImageBox) and values.ndim:  # images stay uint8, each checked (and named) whole
            return CheckedRows([_check_image(space, value, f"{where}[{i}]") for i, value in enumerate(values)],
                               False)
        if isinstance(space, spaces.Box) and values.shape[1:] == space.shape and values.dtype.kind in "iuf":
            try:
                array = _box_array(values, where, space)
            except SpaceError:
                pass  # the per-observation check names the env
            else:
                return CheckedRows(list(array), _beyond(array))
        values = list(values) if values.ndim and isinstance(space, spaces.Box) else values.tolist()
    if not isinstance(values, list):
        raise SpaceError(f"{where} must be a list of observations, one per env")
    if isinstance(space, spaces.Box) and len(space.shape) == 1:
        size = space.shape[0]
        if all(type(value) is list and len(value) == size and _flat_numbers(value) for value in values):
            array = np.array(values, dtype=np.float32).reshape(len(values), size)
            return CheckedRows(list(array), _beyond(array))  # one array, its rows
    rows = [check_observation(space, value, f"{where}[{i}]") for i, value in enumerate(values)]
    return CheckedRows(rows, any(suspect(row) for row in rows))


#: a step's observation is put through the networks before it is stored only when one of its numbers is
#: beyond this magnitude (below it no network of sane weights reaches an output past its limit,
#: `shepherd.agents.sb3.outputs`): honest clients' steps are never asked about
SUSPECT_MAGNITUDE = 1e6


def suspect(obs: Any) -> bool:
    """Whether a raw observation holds a number beyond `SUSPECT_MAGNITUDE` (or one that is not finite)."""
    parts = obs.values() if isinstance(obs, dict) else (obs,)
    for part in parts:
        array = part if isinstance(part, np.ndarray) else np.asarray(part)
        if array.dtype.kind != "f" or not array.size:
            continue
        if array.size <= 64:  # a few numbers: Python's comparisons cost less than numpy's calls (~1 us, not 4)
            if not all(-SUSPECT_MAGNITUDE <= value <= SUSPECT_MAGNITUDE for value in array.ravel().tolist()):
                return True  # (a NaN fails both comparisons)
        elif _beyond(array):
            return True
    return False


def _beyond(array: np.ndarray) -> bool:
    """Whether a float array holds a number beyond `SUSPECT_MAGNITUDE`, or one that is not finite."""
    return bool(array.dtype.kind == "f" and array.size and not np.abs(array).max() <= SUSPECT_MAGNITUDE)


def _check_image(space: ImageBox, value: Any, where: str) -> np.ndarray:
    shape = list(space.shape)
    order = "channels first" if space.channels_first else "channels last"
    if isinstance(value, np.ndarray):  # a tensor already decoded (not JSON): its dtype says what it holds
        raw = value
    else:
        if not isinstance(value, list):
            raise SpaceError(f"{where} must be an image: nested lists of integers 0-255 of shape {shape} ({order})")
        raw = _array(value, where, f"an image of shape {shape} ({order})")
    if raw.shape != space.shape:
        raise SpaceError(f"{where} has shape {list(raw.shape)}, expected an image of shape {shape} ({order})")
    if raw.dtype == np.uint8:
        return raw
    if raw.dtype.kind not in "iu":
        raise SpaceError(f"{where} must contain only integers 0-255 (an image of shape {shape})")
    if raw.size and (raw.min() < 0 or raw.max() > 255):
        bad = np.argwhere((raw < 0) | (raw > 255))[0]
        raise SpaceError(f"{where}{''.join(f'[{int(i)}]' for i in bad)} is {int(raw[tuple(bad)])}, outside 0-255")
    return raw.astype(np.uint8)


def _check_integers(space: spaces.MultiDiscrete | spaces.MultiBinary, value: Any, where: str) -> np.ndarray:
    upper = space.nvec if isinstance(space, spaces.MultiDiscrete) else np.full(space.shape, 2)
    if not isinstance(value, list):
        raise SpaceError(f"{where} must be a list of integers of shape {list(space.shape)}")
    raw = _array(value, where, f"shape {list(space.shape)}")
    if raw.dtype.kind not in "iu" or raw.shape != space.shape:
        raise SpaceError(f"{where} must be a list of integers of shape {list(space.shape)}")
    if np.any(raw < 0) or np.any(raw >= upper):
        raise SpaceError(f"{where} has a value outside its range (0 to {upper.tolist()} minus 1)")
    return raw.astype(space.dtype)


def _array(value: list, where: str, expected: str) -> np.ndarray:
    """Nested JSON lists as one array. Raises SpaceError for a ragged one (``expected``: the shape it should have)."""
    try:
        return np.array(value)
    except ValueError:
        raise SpaceError(f"{where} is a ragged list; expected {expected}") from None


def _flat_numbers(values: list) -> bool:
    """Every item an int or a float (never a bool) whose float32 is finite."""
    for item in values:
        kind = type(item)
        if kind is float:
            if not -_F32_MAX <= item <= _F32_MAX:  # false for NaN too
                return False
        elif kind is not int or not -_F32_MAX <= item <= _F32_MAX:
            return False
    return True


_F32_MAX = float(np.finfo(np.float32).max)
