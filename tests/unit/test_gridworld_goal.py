"""The maze's goal is an attribute read at every reset, so that a lesson's config can move it (docs/lessons.md)."""

from __future__ import annotations

import gymnasium as gym
import pytest

from shepherd.client import apply_config
from shepherd.envs import gridworld  # noqa: F401  registers Grid-v0


def walk(env: gym.Env, moves: list[int]) -> tuple[float, bool]:
    total, terminated = 0.0, False
    for move in moves:
        _, reward, terminated, _, _ = env.step(move)
        total += float(reward)
        if terminated:
            break
    return total, terminated


def test_a_config_moves_the_goal_and_the_episode_ends_there():
    env = gym.make("Grid-v0")
    apply_config(env, {"goal": [0, 3]})  # as the client applies a lesson's config: a JSON list
    env.reset(seed=0)
    assert walk(env, [1, 1, 1]) == (-3.0, True)
    apply_config(env, {"goal": [4, 4]})
    env.reset()
    assert walk(env, [1, 1, 1]) == (-3.0, False)  # the real goal is further on


@pytest.mark.parametrize("goal", [[1, 0], [0, 0], [5, 5], [1]])
def test_a_goal_on_a_wall_the_start_or_off_the_maze_is_refused_at_reset(goal):
    env = gym.make("Grid-v0")
    env.unwrapped.goal = goal
    with pytest.raises(ValueError, match="is not an open cell of the maze other than the start"):
        env.reset()
