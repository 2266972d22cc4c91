"""Image observation spaces: `ImageBox`, SB3's uint8 image ``Box`` that knows its declared channel order
(``["Image", [H, W, C]]`` in the JSON space syntax, `shepherd.wire.spaces`)."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces


class ImageBox(spaces.Box):
    """An image observation: ``Box(0, 255, shape, uint8)``, as SB3's ``is_image_space`` wants it, that also
    knows its declared channel order (SB3 guesses it from the smallest dimension; the spec says it).

    ``height``, ``width`` and ``channels`` are the image's, whatever the order of ``shape``.
    """

    def __init__(self, height: int, width: int, channels: int, channels_first: bool = False) -> None:
        shape = (channels, height, width) if channels_first else (height, width, channels)
        super().__init__(low=0, high=255, shape=shape, dtype=np.uint8)
        self.height, self.width, self.channels, self.channels_first = height, width, channels, channels_first

    def __eq__(self, other: Any) -> bool:
        return (isinstance(other, ImageBox) and other.channels_first == self.channels_first
                and super().__eq__(other))

    def __repr__(self) -> str:
        order = ", channels_first" if self.channels_first else ""
        return f"ImageBox({self.height}, {self.width}, {self.channels}{order})"


def is_image(space: spaces.Space) -> bool:
    """An image observation space (`ImageBox`, from an ``["Image", ...]`` spec)."""
    return isinstance(space, ImageBox)


def uint8_image(space: spaces.Box) -> bool:
    """SB3's ``is_image_space``: three dimensions of uint8 from 0 to 255."""
    return (len(space.shape) == 3 and space.dtype == np.uint8 and bool(np.all(space.low == 0))
            and bool(np.all(space.high == 255)))
