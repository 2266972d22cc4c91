"""A corridor with a cue, walked with alternating feet (``shepherd/Corridor-v0``, docs/levels.md): sparse reward at
the end the cue names, and the skills a hierarchy chooses between, trained on their own start states
(``goal="left"``, ``goal="right"``).

The agent walks left or right along ``length`` cells, one foot after the other: actions 0 and 1 step left with
the left or the right foot, 2 and 3 step right; a step moves only with the other foot than the last one (the same
foot twice stumbles in place). The observation is its position (scaled to [-1, 1]), a cue (-1 or +1, drawn at
each reset) and the foot it last stepped with (-1: left, +1: right). With ``goal="cue"`` (the task) it starts in
the middle and gets 1 for reaching the end the cue names (-1: the left one), 0 for the other end; a walk that
reaches neither in ``max_steps`` ends with 0, so a random walk (which moves every other step, either way) almost
never earns anything. With ``goal="left"`` or ``"right"`` (a skill's own training) it starts anywhere and gets 1
for reaching that end, whatever the cue says. `toward_cue` and `random_skill` are programmed selectors over the
skills ``left`` and ``right``.
"""

from __future__ import annotations

import random
from typing import Any

import gymnasium as gym
import numpy as np

CORRIDOR = "shepherd/Corridor-v0"
GOALS = ("cue", "left", "right")


class CorridorEnv(gym.Env):
    """The corridor; ``goal`` says which end pays (see the module)."""

    def __init__(self, length: int = 31, goal: str = "cue", max_steps: int = 60, cue: float | None = None) -> None:
        """``cue``: -1 or +1 at every reset (an evaluation of each cue alone); None: drawn at each reset."""
        if goal not in GOALS:
            raise ValueError(f"goal must be one of {', '.join(GOALS)}, not {goal!r}")
        self.length, self.goal, self.max_steps, self.fixed_cue = length, goal, max_steps, cue
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(4)  # direction (0, 1: left; 2, 3: right) and foot (even: left)
        self.position, self.cue, self.foot, self.steps = 0, 1.0, 1, 0

    def _obs(self) -> np.ndarray:
        return np.array([2.0 * self.position / (self.length - 1) - 1.0, self.cue, 2.0 * self.foot - 1.0], np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.cue = float(self.np_random.choice([-1.0, 1.0])) if self.fixed_cue is None else float(self.fixed_cue)
        middle = (self.length - 1) // 2
        self.position = middle if self.goal == "cue" else int(self.np_random.integers(1, self.length - 1))
        self.foot = int(self.np_random.integers(2))
        self.steps = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        action = int(action)
        if action % 2 != self.foot:  # the other foot: a step
            self.foot = action % 2
            self.position += 1 if action >= 2 else -1
        self.steps += 1
        end = "left" if self.position <= 0 else "right" if self.position >= self.length - 1 else None
        wanted = self.goal if self.goal != "cue" else ("left" if self.cue < 0 else "right")
        reward = 1.0 if end == wanted else 0.0
        return self._obs(), reward, end is not None, end is None and self.steps >= self.max_steps, {}


def toward_cue(obs: Any) -> str:
    """The programmed selector that knows the task: the skill walking to the end the cue names."""
    return "left" if float(obs[1]) < 0 else "right"


_RANDOM = random.Random(0)


def random_skill(obs: Any) -> str:
    """The random selector: either skill, whatever the observation."""
    return _RANDOM.choice(("left", "right"))


if CORRIDOR not in gym.registry:
    gym.register(CORRIDOR, entry_point=f"{__name__}:CorridorEnv")
