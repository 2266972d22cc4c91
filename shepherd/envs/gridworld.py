"""A small maze whose walls make actions invalid: the env of the action-mask preset and tests.

``gymnasium.make("shepherd.envs.gridworld:MaskedGrid-v0")`` (the module registers the id when imported). The
agent walks a 5x5 maze from the top-left corner to the bottom-right one::

    S . . . .
    # # # . .
    . . . . #
    . # # # .
    . . . . G

Actions 0-3 move up, right, down, left. Each move costs 1 (the shortest path takes 14 moves: return -14).
A move into a wall or off the grid is invalid: it ends the episode with -50. ``action_masks()`` tells
which moves are valid now, as sb3-contrib's ``ActionMasker`` does, so a client sends them as
``"action_mask"`` (`shepherd.client.run_env` does) and a MaskablePPO agent never makes one. The
observation is the position, one-hot (25 values). Episodes are cut at 50 moves. ``Grid-v0`` is the same
maze without ``action_masks()``, for comparison.

The goal is the attribute ``goal`` (row, column), read at every reset: a lesson's config may move it
(``{goal: [0, 3]}``, docs/lessons.md), so that a curriculum starts with the goal near the start and moves it
away (benchmarks/lessons.py). The observation does not show the goal.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

LAYOUT = ("S....",
          "###..",
          "....#",
          ".###.",
          "....G")
MOVES = ((-1, 0), (0, 1), (1, 0), (0, -1))  # up, right, down, left
INVALID_MOVE_REWARD = -50.0
SHORTEST_PATH_RETURN = -14.0


class Grid(gym.Env):
    """The maze above, without masks (``Grid-v0``): a learner must find out which moves are walls."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self) -> None:
        self.rows, self.cols = len(LAYOUT), len(LAYOUT[0])
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.rows * self.cols,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(4)
        self.start = self._find("S")
        self.goal = self._find("G")
        self.position = self.start

    def _find(self, mark: str) -> tuple[int, int]:
        return next((r, c) for r, row in enumerate(LAYOUT) for c, cell in enumerate(row) if cell == mark)

    def _open(self, row: int, col: int) -> bool:
        return 0 <= row < self.rows and 0 <= col < self.cols and LAYOUT[row][col] != "#"

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.rows * self.cols, dtype=np.float32)
        obs[self.position[0] * self.cols + self.position[1]] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        cell = list(self.goal)  # a config's goal arrives as a JSON list
        goal = (int(cell[0]), int(cell[1])) if len(cell) == 2 else self.start
        if not self._open(*goal) or goal == self.start:
            raise ValueError(f"goal {cell} is not an open cell of the maze other than the start")
        self.goal = goal
        self.position = self.start
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        dr, dc = MOVES[int(action)]
        row, col = self.position[0] + dr, self.position[1] + dc
        if not self._open(row, col):
            return self._obs(), INVALID_MOVE_REWARD, True, False, {"invalid_move": True}
        self.position = (row, col)
        return self._obs(), -1.0, self.position == self.goal, False, {}


class MaskedGrid(Grid):
    """The maze above; ``action_masks()`` gives the valid moves from the current cell."""

    def action_masks(self) -> np.ndarray:
        row, col = self.position
        return np.array([self._open(row + dr, col + dc) for dr, dc in MOVES])


gym.register("MaskedGrid-v0", entry_point="shepherd.envs.gridworld:MaskedGrid", max_episode_steps=50)
gym.register("Grid-v0", entry_point="shepherd.envs.gridworld:Grid", max_episode_steps=50)
