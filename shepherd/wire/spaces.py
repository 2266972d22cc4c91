"""The JSON space syntax of Shepherd agents, and conversions of actions and checks of action masks (observations
are checked against a space in `shepherd.wire.observations`).

Syntax (as in the original Shepherd):

- an integer ``n`` is ``Discrete(n)``;
- ``[shape, low, high]`` is a float32 ``Box``; ``low``/``high`` are numbers, ``"-inf"``/``"inf"``, or
  nested lists in the box's shape;
- ``["MultiDiscrete", [n1, n2, ...]]`` is ``MultiDiscrete([n1, n2, ...])``;
- ``["MultiBinary", n]`` (or ``["MultiBinary", [n1, n2]]``) is ``MultiBinary``;
- ``["Image", [H, W, C]]`` is a uint8 image, 0-255, channels last (a `shepherd.wire.images.ImageBox`,
  ``Box(0, 255, (H, W, C), uint8)``); ``["Image", [H, W, C], "channels_first"]`` the same image sent channels first (``(C, H, W)``);
  observations only;
- an object maps names to such specs and is a ``Dict`` space (observations only).
"""

from __future__ import annotations

import math
from typing import Any, Union

import numpy as np
from gymnasium import spaces

from shepherd.wire.images import ImageBox, uint8_image

SpaceSpec = Union[int, list, dict]


#: the largest spaces an agent may have: a box of ~1M numbers (a 1024x1024 image), 65,536 choices. Past
#: them a policy's first or last layer alone would hold hundreds of millions of weights.
MAX_BOX_ELEMENTS = 1 << 20
MAX_CHOICES = 1 << 16


class SpaceError(ValueError):
    """A space spec, an observation or an action does not fit; the message says what and where."""


def _bound(value: Any, where: str) -> float | np.ndarray:
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("inf", "+inf", "infinity"):
            return math.inf
        if text in ("-inf", "-infinity"):
            return -math.inf
        raise SpaceError(f"{where}: {value!r} is not a number, 'inf' or '-inf'")
    if isinstance(value, bool) or not isinstance(value, (int, float, list)):
        raise SpaceError(f"{where}: {value!r} is not a number")
    if isinstance(value, list):
        return np.array([_bound(v, where) for v in value], dtype=np.float64)
    return float(value)


def parse_space(spec: Any, where: str = "space") -> spaces.Space:
    """Build a gymnasium space from its JSON spec.

    Raises:
        SpaceError: the spec is not one of the accepted forms.
    """
    if isinstance(spec, bool):
        raise SpaceError(f"{where}: a boolean is not a space; use an integer n for n discrete actions")
    if isinstance(spec, int):
        if spec < 1:
            raise SpaceError(f"{where}: a discrete space needs at least 1 value, got {spec}")
        _at_most(spec, MAX_CHOICES, where, "discrete values")
        return spaces.Discrete(spec)
    if isinstance(spec, list) and spec and spec[0] == "Image":
        return _parse_image(spec, where)
    if isinstance(spec, list) and len(spec) == 2 and isinstance(spec[0], str):
        return _parse_multi(spec[0], spec[1], where)
    if isinstance(spec, list):
        if len(spec) != 3:
            raise SpaceError(f"{where}: a box is [shape, low, high], got a list of {len(spec)} items")
        shape, low, high = spec
        if isinstance(shape, int) and not isinstance(shape, bool):
            shape = [shape]
        if not isinstance(shape, list) or not shape or not all(
            isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape
        ):
            raise SpaceError(f"{where}: the shape of a box is a list of positive integers, got {shape!r}")
        _at_most(math.prod(shape), MAX_BOX_ELEMENTS, where, "numbers in a box")  # before allocating it
        low_v, high_v = _bound(low, f"{where} low"), _bound(high, f"{where} high")
        try:
            low_a = np.broadcast_to(np.asarray(low_v, dtype=np.float64), shape)
            high_a = np.broadcast_to(np.asarray(high_v, dtype=np.float64), shape)
        except ValueError:
            raise SpaceError(f"{where}: low and high must be numbers or lists of shape {shape}") from None
        if np.any(low_a > high_a):
            raise SpaceError(f"{where}: low is above high")
        f32 = np.finfo(np.float32)
        # The seed's CartPole spec uses +-3.4028234663852886e+38, a hair above float32's max: clip it.
        low_a = np.where(np.isfinite(low_a), np.clip(low_a, f32.min, f32.max), low_a)
        high_a = np.where(np.isfinite(high_a), np.clip(high_a, f32.min, f32.max), high_a)
        return spaces.Box(low=low_a.astype(np.float32), high=high_a.astype(np.float32), dtype=np.float32)
    if isinstance(spec, dict):
        if not spec:
            raise SpaceError(f"{where}: a dict space needs at least one entry")
        items = {}
        for key, sub in spec.items():
            sub_space = parse_space(sub, f"{where}.{key}")
            if isinstance(sub_space, spaces.Dict):
                raise SpaceError(f"{where}.{key}: dict spaces cannot be nested")
            items[str(key)] = sub_space
        return spaces.Dict(items)
    raise SpaceError(f"{where}: expected an integer, [shape, low, high], [\"MultiDiscrete\", [n, ...]], "
                     f"[\"MultiBinary\", n], [\"Image\", [H, W, C]] or an object, got {type(spec).__name__}")


def _parse_image(spec: list, where: str) -> ImageBox:
    usage = "[\"Image\", [H, W, C]] (channels last) or [\"Image\", [H, W, C], \"channels_first\"]"
    if len(spec) not in (2, 3):
        raise SpaceError(f"{where}: an image is {usage}, got a list of {len(spec)} items")
    shape = spec[1]
    if not isinstance(shape, list) or len(shape) != 3 or not all(_positive_int(d) for d in shape):
        raise SpaceError(f"{where}: an image's shape is [H, W, C], three positive integers, got {shape!r}")
    order = spec[2] if len(spec) == 3 else "channels_last"
    if order not in ("channels_last", "channels_first"):
        raise SpaceError(f"{where}: an image's channel order is \"channels_last\" or \"channels_first\", got {order!r}")
    _at_most(math.prod(shape), MAX_BOX_ELEMENTS, where, "numbers in an image")
    height, width, channels = shape
    return ImageBox(height, width, channels, channels_first=order == "channels_first")


def _at_most(count: int, limit: int, where: str, what: str) -> None:
    if count > limit:
        raise SpaceError(f"{where}: {count:,} {what} is more than Shepherd serves ({limit:,} at most)")


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _parse_multi(kind: str, arg: Any, where: str) -> spaces.Space:
    if kind == "MultiDiscrete":
        if not isinstance(arg, list) or not arg or not all(_positive_int(n) for n in arg):
            raise SpaceError(f"{where}: MultiDiscrete takes a list of positive integers (values per "
                             f"dimension), got {arg!r}")
        _at_most(sum(arg), MAX_CHOICES, where, "discrete values in all")
        return spaces.MultiDiscrete(arg)
    if kind == "Image":
        raise SpaceError(f"{where}: an image is [\"Image\", [H, W, C]] or [\"Image\", [H, W, C], \"channels_first\"], "
                         f"got [\"Image\", {arg!r}]")  # its 3-item form is `_parse_image`
    if kind == "MultiBinary":
        if _positive_int(arg) or (isinstance(arg, list) and arg and all(_positive_int(n) for n in arg)):
            _at_most(math.prod(arg) if isinstance(arg, list) else arg, MAX_CHOICES, where, "binary values")
            return spaces.MultiBinary(arg)
        raise SpaceError(f"{where}: MultiBinary takes a positive integer or a list of them (its shape), "
                         f"got {arg!r}")
    raise SpaceError(f"{where}: unknown space {kind!r}; a 2-item list is [\"MultiDiscrete\", [n, ...]] or "
                     f"[\"MultiBinary\", n]")


def _json_number(v: float) -> float | str:
    return v if math.isfinite(v) else ("inf" if v > 0 else "-inf")


def _json_bound(values: np.ndarray) -> Any:
    flat = values.astype(np.float64).reshape(-1)
    if np.all(flat == flat[0]):
        return _json_number(float(flat[0]))
    nested = values.astype(np.float64).tolist()

    def convert(x: Any) -> Any:
        return [convert(v) for v in x] if isinstance(x, list) else _json_number(x)

    return convert(nested)


def space_to_json(space: spaces.Space) -> SpaceSpec:
    """The JSON spec of a space built by `parse_space` (infinite bounds as ``"inf"`` strings)."""
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, ImageBox):
        shape = [space.height, space.width, space.channels]
        return ["Image", shape, "channels_first"] if space.channels_first else ["Image", shape]
    if isinstance(space, spaces.Box) and uint8_image(space):  # an env's image (a zoo env's): SB3's reading
        first = int(np.argmin(space.shape)) == 0  # SB3's is_image_space_channels_first: the smallest dimension
        height, width, channels = (space.shape[1], space.shape[2], space.shape[0]) if first else space.shape
        return space_to_json(ImageBox(height, width, channels, first))
    if isinstance(space, spaces.Box):
        return [list(space.shape), _json_bound(space.low), _json_bound(space.high)]
    if isinstance(space, spaces.MultiDiscrete) and space.nvec.ndim == 1 and not np.any(space.start):
        return ["MultiDiscrete", [int(n) for n in space.nvec]]
    if isinstance(space, spaces.MultiBinary):
        shape = [int(n) for n in np.atleast_1d(space.n)]
        return ["MultiBinary", shape[0] if len(shape) == 1 else shape]
    if isinstance(space, spaces.Dict):
        return {key: space_to_json(sub) for key, sub in space.spaces.items()}
    raise SpaceError(f"space {space} has no JSON form")


def action_to_json(space: spaces.Space, action: Any) -> Any:
    """Convert an action chosen by a learner to its JSON value (an int, or nested lists in the space's shape)."""
    if isinstance(space, spaces.Discrete):
        if isinstance(action, (int, np.integer)):
            return int(action)
        return int(np.asarray(action).reshape(-1)[0])
    if isinstance(space, spaces.Box):
        return np.asarray(action, dtype=np.float64).reshape(space.shape).tolist()
    if isinstance(space, (spaces.MultiDiscrete, spaces.MultiBinary)):
        return np.asarray(action).astype(np.int64).reshape(space.shape).tolist()
    raise SpaceError(f"action space {space} is not supported")


def action_from_json(space: spaces.Space, value: Any) -> Any:
    """Convert a JSON action from the server to what a gymnasium env's ``step`` takes."""
    if isinstance(space, spaces.Discrete):
        return int(value)
    if isinstance(space, spaces.Box):
        return np.asarray(value, dtype=space.dtype).reshape(space.shape)
    return np.asarray(value, dtype=np.int64)


def mask_size(space: spaces.Space) -> int | None:
    """How many booleans an action mask of ``space`` has, as sb3-contrib takes them: ``n`` for
    ``Discrete(n)``, the sum of ``nvec`` for ``MultiDiscrete`` (the sub-actions' masks concatenated), two
    per bit for ``MultiBinary`` (0 and 1); None for spaces that take no mask (``Box``)."""
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    if isinstance(space, spaces.MultiBinary):
        return 2 * int(np.prod(space.shape))
    return None


def mask_groups(space: spaces.Space) -> list[int]:
    """The sizes of the mask's groups, each one sub-action's choices (at least one must stay allowed)."""
    if isinstance(space, spaces.MultiDiscrete):
        return [int(n) for n in np.asarray(space.nvec).reshape(-1)]
    if isinstance(space, spaces.MultiBinary):
        return [2] * int(np.prod(space.shape))
    return [mask_size(space) or 0]


def check_action_mask(space: spaces.Space, value: Any, where: str = "action_mask") -> np.ndarray:
    """A client's action mask as a flat boolean array: true where the action may be chosen.

    Raises:
        SpaceError: not a list of booleans (``0``/``1`` pass) of `mask_size`'s length, or every choice of
            the action (of one sub-action for ``MultiDiscrete``/``MultiBinary``) masked out.
    """
    size = mask_size(space)
    if size is None:
        raise SpaceError(f"{type(space).__name__} actions take no action mask")
    if isinstance(value, np.ndarray):  # a binary body's tensor: booleans (or 0 and 1), else as its JSON
        if value.shape == (size,) and (value.dtype == bool or (value.dtype.kind in "iu" and ((value == 0) | (value == 1)).all())):
            return _allowing(space, value.astype(bool), where)
        value = value.tolist()
    if not isinstance(value, list) or len(value) != size:
        got = f"{len(value)} items" if isinstance(value, list) else type(value).__name__
        raise SpaceError(f"'{where}' must be a list of {size} booleans (one per {_mask_unit(space)}); got {got}")
    for index, item in enumerate(value):
        if not (isinstance(item, bool) or (isinstance(item, int) and item in (0, 1))):
            raise SpaceError(f"{where}[{index}] must be true or false")
    return _allowing(space, np.asarray(value, dtype=bool), where)


def _allowing(space: spaces.Space, mask: np.ndarray, where: str) -> np.ndarray:
    """``mask``, refused when it masks out every choice of the action (of a sub-action)."""
    start = 0
    for group, width in enumerate(mask_groups(space)):
        if not mask[start:start + width].any():
            which = "every action" if len(mask_groups(space)) == 1 else f"every choice of sub-action {group}"
            raise SpaceError(f"'{where}' masks out {which}: at least one must stay allowed")
        start += width
    return mask


def _mask_unit(space: spaces.Space) -> str:
    if isinstance(space, spaces.MultiDiscrete):
        return "choice of each sub-action, concatenated"
    if isinstance(space, spaces.MultiBinary):
        return "bit and value: [bit0=0, bit0=1, bit1=0, ...]"
    return "action"
