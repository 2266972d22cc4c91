"""Gymnasium environments of Shepherd's own, for presets that need one gymnasium does not ship.

``shepherd/CartPoleNoVel-v1``: CartPole-v1 with the velocities hidden, the observation is ``[x, theta]``
only (RL Zoo's CartPoleNoVel): a policy must remember past positions to balance the pole, so it needs
memory (RecurrentPPO's LSTM). Any process makes it by its id with the module in front, which imports
this module and so registers it::

    gymnasium.make("shepherd.envs:shepherd/CartPoleNoVel-v1")
    python -m shepherd.client --env shepherd.envs:shepherd/CartPoleNoVel-v1
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

CARTPOLE_NO_VELOCITY = "shepherd/CartPoleNoVel-v1"
#: the id to give ``gymnasium.make`` (or a client's ``--env``) from a process that has not imported this module
CARTPOLE_NO_VELOCITY_MODULE_ID = f"{__name__}:{CARTPOLE_NO_VELOCITY}"


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


if CARTPOLE_NO_VELOCITY not in gym.registry:
    gym.register(CARTPOLE_NO_VELOCITY, entry_point=f"{__name__}:CartPoleNoVelEnv", max_episode_steps=500,
                 reward_threshold=475.0)
