"""A dot to walk to the right edge of a small picture (``shepherd/PixelDot-v0``): an env seen only as pixels,
small enough for tests and the pixel how-to (docs/how-to/pixels.md) to learn it in seconds on a CPU.

The observation is a ``size`` x ``size`` uint8 image, black but for a white column at the dot's position
(``channels`` copies of it, channels last, or channels first with ``channels_first``; with ``dict_obs`` an object
``{"pixels": image, "step": [t / max_steps]}``). Action 0 moves the dot one column left, 1 one column right; reaching
the right edge gives 1 and ends the episode, every other step gives -0.01. Episodes start at a random column in
the left half and are cut at ``max_steps``. SB3's NatureCNN needs ``size`` >= 36.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

PIXEL_DOT = "shepherd/PixelDot-v0"


class PixelDotEnv(gym.Env):
    """See the module docstring."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, size: int = 36, channels: int = 1, channels_first: bool = False, dict_obs: bool = False,
                 max_steps: int = 60, render_mode: str | None = None) -> None:
        self.render_mode = render_mode
        self.size, self.channels, self.channels_first, self.max_steps = size, channels, channels_first, max_steps
        shape = (channels, size, size) if channels_first else (size, size, channels)
        image = gym.spaces.Box(0, 255, shape, np.uint8)
        self.dict_obs = dict_obs
        self.observation_space: gym.Space = (gym.spaces.Dict({"pixels": image,
                                                               "step": gym.spaces.Box(0, 1, (1,), np.float32)})
                                             if dict_obs else image)
        self.action_space = gym.spaces.Discrete(2)
        self.position, self.t = 0, 0

    def _obs(self) -> Any:
        frame = np.zeros((self.size, self.size), np.uint8)
        frame[:, self.position] = 255
        image = np.repeat(frame[None] if self.channels_first else frame[..., None], self.channels,
                          axis=0 if self.channels_first else -1)
        if self.dict_obs:
            return {"pixels": image, "step": np.array([self.t / self.max_steps], np.float32)}
        return image

    def render(self) -> np.ndarray:
        frame = np.zeros((self.size, self.size, 3), np.uint8)
        frame[:, self.position] = 255
        return frame

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.position, self.t = int(self.np_random.integers(0, self.size // 2)), 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.position = int(np.clip(self.position + (1 if int(action) == 1 else -1), 0, self.size - 1))
        self.t += 1
        reached = self.position == self.size - 1
        return self._obs(), 1.0 if reached else -0.01, reached, self.t >= self.max_steps and not reached, {}


if PIXEL_DOT not in gym.registry:
    gym.register(PIXEL_DOT, entry_point=f"{__name__}:PixelDotEnv", reward_threshold=0.7)  # 0.745: the best mean
