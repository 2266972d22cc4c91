"""An on-policy actor that leaves its rollout segment with a row pending (a dropped session, one that stalls while
others wait for a segment, an episode abandoned by a new BEGIN) bootstraps the row before it with the pending row's
value, as at a time limit, but only when that row is of the same episode: a pending row that starts an episode (or
a stretch of a segment) follows another episode's end, or another actor's. The check looked at the actor's
``fresh_segment``, which its first write clears: a terminal reward of 5 became 5.14 with the next episode's first
value, and a time limit's end, bootstrapped already, was bootstrapped again with another actor's value. The
checkpoint's rollout (`resume.rollout_state`) made the same addition."""

from __future__ import annotations

import numpy as np
import pytest

from shepherd.agents import ActMode, Kind, Request, build_learner
from shepherd.agents.sb3.resume import rollout_state
from shepherd.wire.spaces import parse_space


def adapter(**parameters):
    learner = build_learner("PPO", "p", parse_space([[4], -1, 1]), parse_space(2),
                            {"n_steps": 8, "n_envs": 1, "batch_size": 8, "seed": 0, **parameters}, None)
    return learner.algorithm


def obs(value: float) -> np.ndarray:
    return np.full(4, value, np.float32)


def an_episode_then_the_next_ones_first_act(algorithm) -> None:
    for request in [Request(Kind.BEGIN, 1, obs(0.1), mode=ActMode.EXPLORE),
                    Request(Kind.STEP, 1, obs(0.2), 1.0, mode=ActMode.EXPLORE),
                    Request(Kind.STEP, 1, obs(0.3), 1.0, mode=ActMode.EXPLORE),
                    Request(Kind.END, 1, obs(0.4), 5.0, False, ActMode.EXPLORE),  # terminal: row 2's reward is 5
                    Request(Kind.BEGIN, 1, obs(0.9), mode=ActMode.EXPLORE)]:  # the next episode: row 3, pending
        algorithm.process([request])


@pytest.mark.parametrize("leaving", ["drop", "begin", "stall"])
def test_a_terminal_reward_is_not_bootstrapped_with_the_next_episodes_first_value(leaving):
    algorithm = adapter()
    an_episode_then_the_next_ones_first_act(algorithm)
    assert algorithm.buffer.episode_starts[3, 0] == 1.0 and algorithm.buffer.values[3, 0] != 0
    assert float(rollout_state(algorithm)["arrays"]["rewards"][2, 0]) == 5.0  # a checkpoint's rollout too
    if leaving == "drop":
        algorithm.process([Request(Kind.DROP, 1)])
    elif leaving == "begin":  # the episode abandoned: a new one begins
        algorithm.process([Request(Kind.BEGIN, 1, obs(0.5), mode=ActMode.EXPLORE)])
    else:  # it stalls while another actor waits for a segment
        algorithm._waiting.append(Request(Kind.ACT, 2, obs(0.0), mode=ActMode.EXPLORE))
        algorithm._actors[1].last_seen -= 100
        algorithm.idle()
    assert float(algorithm.buffer.rewards[2, 0]) == 5.0


def test_a_time_limits_end_is_bootstrapped_once_not_again_with_another_actors_value():
    algorithm = adapter(gamma=0.5)
    for request in [Request(Kind.BEGIN, 1, obs(0.1), mode=ActMode.EXPLORE),
                    Request(Kind.STEP, 1, obs(0.2), 1.0, mode=ActMode.EXPLORE),
                    Request(Kind.END, 1, obs(0.3), 1.0, True, ActMode.EXPLORE)]:  # truncated: bootstrapped
        algorithm.process([request])
    bootstrapped = float(algorithm.buffer.rewards[1, 0])
    assert bootstrapped != 1.0
    algorithm.process([Request(Kind.BEGIN, 2, obs(0.9), mode=ActMode.EXPLORE)])  # another actor, the next row
    algorithm.process([Request(Kind.DROP, 2)])
    assert float(algorithm.buffer.rewards[1, 0]) == bootstrapped
