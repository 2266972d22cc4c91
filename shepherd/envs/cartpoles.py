"""Gymnasium environments of Shepherd's own, for presets that need one gymnasium does not ship.

``shepherd/CartPoleNoVel-v1``: CartPole-v1 with the velocities hidden, the observation is ``[x, theta]``
only (RL Zoo's CartPoleNoVel): a policy must remember past positions to balance the pole, so it needs
memory (RecurrentPPO's LSTM). Any process makes it by its id with the module in front, which imports
this module and so registers it::

    gymnasium.make("shepherd.envs:shepherd/CartPoleNoVel-v1")
    python -m shepherd.client --env shepherd.envs:shepherd/CartPoleNoVel-v1

``shepherd/CartPoleSensors-v1``: CartPole-v1 observed as raw sensors would report it: the cart's position in
millimetres from a rail end 2.4 m away, its speed in mm/s, the pole's angle and angular speed in
millidegrees (and per second). The same task, numbers three to five orders of magnitude larger and offset:
what a real client sends, and what an agent's observation normalisation (``filters``) is for.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

CARTPOLE_NO_VELOCITY = "shepherd/CartPoleNoVel-v1"
#: the id to give ``gymnasium.make`` (or a client's ``--env``) from a process that has not imported this module
CARTPOLE_NO_VELOCITY_MODULE_ID = f"{__name__}:{CARTPOLE_NO_VELOCITY}"
CARTPOLE_SENSORS = "shepherd/CartPoleSensors-v1"
#: observation = SENSOR_SCALE * CartPole's + SENSOR_OFFSET
SENSOR_SCALE = np.array([1000.0, 1000.0, 180_000.0 / np.pi, 180_000.0 / np.pi], dtype=np.float64)
SENSOR_OFFSET = np.array([2400.0, 0.0, 0.0, 0.0], dtype=np.float64)


class CartPoleNoVelEnv(CartPoleEnv):
    """CartPole whose observation is the cart's position and the pole's angle, without their velocities."""

    def __init__(self, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        high = np.array([self.x_threshold * 2, self.theta_threshold_radians * 2], dtype=np.float32)
        self.observation_space = gym.spaces.Box(-high, high, dtype=np.float32)

    @staticmethod
    def _positions(full: np.ndarray) -> np.ndarray:
        return np.array([full[0], full[2]], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        full, info = super().reset(seed=seed, options=options)
        return self._positions(full), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        full, reward, terminated, truncated, info = super().step(action)
        return self._positions(full), float(reward), terminated, truncated, info


class CartPoleSensorsEnv(CartPoleEnv):
    """CartPole observed in sensor units: millimetres, mm/s, millidegrees, millidegrees/s (see above)."""

    def __init__(self, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        low, high = self.observation_space.low, self.observation_space.high  # type: ignore[attr-defined]
        self.observation_space = gym.spaces.Box(self._sensed(low), self._sensed(high), dtype=np.float32)

    @staticmethod
    def _sensed(full: np.ndarray) -> np.ndarray:
        return (np.asarray(full, np.float64) * SENSOR_SCALE + SENSOR_OFFSET).astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        full, info = super().reset(seed=seed, options=options)
        return self._sensed(full), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        full, reward, terminated, truncated, info = super().step(action)
        return self._sensed(full), float(reward), terminated, truncated, info


if CARTPOLE_SENSORS not in gym.registry:
    gym.register(CARTPOLE_SENSORS, entry_point=f"{__name__}:CartPoleSensorsEnv", max_episode_steps=500,
                 reward_threshold=475.0)
if CARTPOLE_NO_VELOCITY not in gym.registry:
    gym.register(CARTPOLE_NO_VELOCITY, entry_point=f"{__name__}:CartPoleNoVelEnv", max_episode_steps=500,
                 reward_threshold=475.0)
