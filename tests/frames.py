"""Test frames of four kinds (noise, a flat colour, a gradient, a square on black), 36 x 36 x 3 uint8, so that an
image policy's actions vary from frame to frame."""

from __future__ import annotations

import numpy as np


def paint(frame: np.ndarray, kind: int, rng: np.random.Generator) -> np.ndarray:
    """Fill ``frame`` (36 x 36 x 3 uint8) with the ``kind``-th of the four (modulo 4); returns it."""
    kind %= 4
    if kind == 0:
        frame[:] = rng.integers(0, 256, frame.shape, dtype=np.uint8)
    elif kind == 1:
        frame[:] = rng.integers(256)
    elif kind == 2:
        frame[:] = (np.linspace(0, 255, 36)[None, :, None] * rng.random(3)).astype(np.uint8)
    else:
        row, column = rng.integers(0, 28, 2)
        frame[row:row + 8, column:column + 8] = rng.integers(0, 256, 3)
    return frame


def frames(rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` frames, of the four kinds in turn."""
    batch = np.zeros((count, 36, 36, 3), np.uint8)
    for i, frame in enumerate(batch):
        paint(frame, i, rng)
    return batch
