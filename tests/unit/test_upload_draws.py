"""The bound on a Gaussian policy's uploaded samples (issue 48, H1): what the behaviour file's Box-Muller draw can
give is accepted, anything further from the mean is refused, with its [t][i]."""

from __future__ import annotations

import math

import numpy as np

from shepherd.agents.sb3.uploads import GAUSSIAN_DRAW_LIMIT, outside_draws


def file_draw(u1: np.float32, u2: np.float32) -> np.float32:
    """The behaviour file's standard normal, in float32 as it computes it (shepherd/agents/export/behaviour.py)."""
    one = np.float32(1)
    return np.sqrt(np.float32(-2) * np.log(one - u1)) * np.cos(np.float32(2 * math.pi) * u2)


def test_the_farthest_draw_of_the_file_is_within_the_limit_and_the_limit_is_near_it():
    farthest = abs(float(file_draw(np.nextafter(np.float32(1), np.float32(0)), np.float32(0))))
    assert 5.7 < farthest < GAUSSIAN_DRAW_LIMIT < 6.5


def test_every_draw_the_file_can_make_passes():
    rng = np.random.default_rng(0)
    mean = rng.normal(scale=3, size=(16, 4, 2)).astype(np.float32)
    std = np.exp(rng.normal(size=(16, 4, 2))).astype(np.float32)
    u1 = np.concatenate([rng.random(16 * 4 * 2 - 2, dtype=np.float32),
                         [np.nextafter(np.float32(1), np.float32(0))] * 2]).reshape(mean.shape)
    u2 = np.concatenate([rng.random(16 * 4 * 2 - 2, dtype=np.float32), [0.0, 0.5]]).astype(np.float32)
    z = file_draw(u1, u2.reshape(mean.shape))
    assert outside_draws(mean + std * z, mean, std) is None


def test_a_sample_beyond_the_limit_is_named_by_row_and_env():
    mean, std = np.zeros((3, 2, 1), np.float32), np.full((3, 2, 1), 0.5, np.float32)
    sample = mean.copy()
    sample[2, 1, 0] = 0.5 * 6.01
    assert outside_draws(sample, mean, std) == (2, 1)
    sample[1, 0, 0] = -1e4
    assert outside_draws(sample, mean, std) == (1, 0)


def test_the_issues_samples_and_a_mean_that_is_not_finite_are_refused():
    mean, std = np.zeros((2, 1, 1), np.float32), np.ones((2, 1, 1), np.float32)
    for value in (1e4, -3e38, 3e38):
        assert outside_draws(np.full((2, 1, 1), value, np.float32), mean, std) == (0, 0)
    assert outside_draws(np.zeros((2, 1, 1), np.float32), np.full((2, 1, 1), np.nan, np.float32), std) == (0, 0)
