"""An upload's numpy column path (`shepherd.wire.columns`) accepts and refuses exactly what the per-value checker
(`checked_experience`) does: the same arrays, or the same error word for word, on thousands of altered uploads."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest
from gymnasium import spaces

from shepherd.wire import columns as column_path
from shepherd.wire.experience import ExperienceSpaces, checked_experience, parse_experience
from shepherd.wire.spaces import check_action_mask, mask_size, parse_space
from shepherd.wire.steps import BadRequest

N, T = 3, 4
#: values put in place of one item of a column: bad ones, unusual valid ones, and plain ones
ODD = [True, False, None, "x", 1e39, -1e39, 3.4028235e38, 2 ** 60, 2 ** 53 + 1, -1, 2, 0, 1, 0.5, -0.0, 7, 1e6 + 1,
       [], [1.0], [0, 1], {}, {"a": 1}, [[0.5]]]

CASES = {
    "box obs, discrete samples": (spaces.Box(-np.inf, np.inf, (4,), np.float32), spaces.Discrete(3, start=0), False),
    "image obs, bounded box samples": (spaces.Box(0, 1, (2, 3), np.float32), spaces.Box(-1, 1, (2,), np.float32),
                                       False),
    "discrete obs, multidiscrete samples": (spaces.Discrete(5), spaces.MultiDiscrete([2, 3]), False),
    "multibinary obs, multibinary samples": (spaces.MultiBinary(3), spaces.MultiBinary(2), False),
    "masked discrete samples": (spaces.Box(-np.inf, np.inf, (2,), np.float32), spaces.Discrete(3), True),
    "masked multidiscrete samples": (spaces.Box(-np.inf, np.inf, (2,), np.float32), spaces.MultiDiscrete([2, 3]),
                                     True),
    "masked multibinary samples": (spaces.Box(-np.inf, np.inf, (2,), np.float32), spaces.MultiBinary(2), True),
    "pixel obs": (parse_space(["Image", [2, 3, 2]]), spaces.Discrete(2), False),
    "dict obs with pixels": (parse_space({"eye": ["Image", [2, 2, 1], "channels_first"], "v": [[1], -1, 1]}),
                             spaces.Discrete(2), False),
    "dict obs": (spaces.Dict({"a": spaces.Box(-1, 1, (2,), np.float32), "b": spaces.Discrete(2)}),
                 spaces.Discrete(2), False),
}


def drawn(space: spaces.Space, count: int = 12) -> list:
    """``count`` values of ``space`` as JSON would carry them."""
    def value(draw):
        if isinstance(draw, dict):
            return {key: v.tolist() if hasattr(v, "tolist") else v for key, v in draw.items()}
        return draw.tolist() if hasattr(draw, "tolist") else int(draw)

    return [value(space.sample()) for _ in range(count)]


def good_body(observations: list, samples: list, mask_size: int, rng: np.random.Generator) -> dict:
    def pick(pool):
        return copy.deepcopy(pool[rng.integers(len(pool))])

    ended = rng.random((T, N)) < 0.3
    truncated = ended & (rng.random((T, N)) < 0.5)
    body = {"policy_version": 2, "seq": 5,
            "obs": [[pick(observations) for _ in range(N)] for _ in range(T + 1)],
            "sample": [[pick(samples) for _ in range(N)] for _ in range(T)],
            "reward": rng.normal(size=(T, N)).tolist(),
            "terminated": (ended & ~truncated).tolist(), "truncated": truncated.tolist(),
            "final_obs": [[pick(observations) if ended[t, i] else None for i in range(N)] for t in range(T)]}
    if mask_size:
        body["action_mask"] = [[[True] * mask_size for _ in range(N)] for _ in range(T + 1)]
    return body


def outcome(parse, data, checks):
    try:
        experience = parse(data, checks, N, T)
    except BadRequest as error:
        return ("refused", type(error).__name__, str(error))
    obs = experience.obs if isinstance(experience.obs, dict) else {"": experience.obs}
    return ("accepted", {k: (v.dtype.str, v.shape, v.tobytes()) for k, v in obs.items()},
            *((a.dtype.str, a.shape, a.tobytes()) for a in (experience.sample, experience.reward,
                                                            experience.terminated, experience.truncated)),
            experience.digest(), experience.seq, experience.policy_version)


def altered(body: dict, rng: random.Random) -> dict:
    """The body with one item somewhere replaced, or a row cut or lengthened."""
    data = body
    field = rng.choice(["obs", "sample", "reward", "terminated", "truncated", "final_obs", "action_mask", "seq"]
                       if "action_mask" in data else ["obs", "sample", "reward", "terminated", "truncated",
                                                      "final_obs", "seq"])
    if field == "seq":
        data["seq"] = rng.choice(ODD)
        return data
    rows = data[field]
    t = rng.randrange(len(rows))
    kind = rng.random()
    if kind < 0.1:
        rows[t] = rows[t][:-1] if rng.random() < 0.5 else rows[t] + [rows[t][0]]
        return data
    i = rng.randrange(N)
    if field == "action_mask" and kind < 0.3:  # choices masked out: a sub-action's, or the one sampled
        mask = rows[t][i]
        start = rng.randrange(len(mask))
        width = rng.choice([1, 2, 3])
        mask[start:start + width] = [False] * len(mask[start:start + width])
        return data
    target, key = rows[t], i
    while isinstance(target[key], (list, dict)) and target[key] and rng.random() < 0.6:  # sometimes deeper
        inner = target[key]
        target, key = inner, rng.choice(list(inner)) if isinstance(inner, dict) else rng.randrange(len(inner))
    target[key] = rng.choice(ODD)
    return data


@pytest.mark.parametrize("case", list(CASES))
def test_the_column_path_and_the_per_value_checker_agree_on_altered_uploads(case):
    observation, sample, masks = CASES[case]
    observation.seed(1)
    sample.seed(2)
    checks = ExperienceSpaces(observation, sample, sample if masks else None,
                              (lambda value, space, where: check_action_mask(space, value, where)) if masks else None)
    rng, np_rng = random.Random(case), np.random.default_rng(3)
    observations, samples = drawn(observation), drawn(sample)
    accepted = refused = 0
    for trial in range(300):
        body = good_body(observations, samples, mask_size(sample) if masks else 0, np_rng)
        data = body if trial % 10 == 0 else altered(body, rng)
        fast, slow = outcome(parse_experience, data, checks), outcome(checked_experience, data, checks)
        assert fast == slow, (trial, data)
        accepted += fast[0] == "accepted"
        refused += fast[0] == "refused"
    assert accepted >= 40 and refused >= 40  # both sides exercised


def test_a_good_upload_takes_the_column_path(monkeypatch):
    observation, sample, _ = CASES["box obs, discrete samples"]
    body = good_body(drawn(observation), drawn(sample), 0, np.random.default_rng(0))
    monkeypatch.setattr("shepherd.wire.experience.checked_experience", _never)
    experience = parse_experience(body, ExperienceSpaces(observation, sample), N, T)
    assert experience.obs.shape == (T + 1, N, 4) and experience.obs.dtype == np.float32
    assert column_path.columns(body, observation, sample, N, T, 1e6) is not None


def _never(*args):
    raise AssertionError("the per-value checker was called for a good upload")


def test_good_masks_take_the_column_path(monkeypatch):
    observation, sample, _ = CASES["masked multidiscrete samples"]
    body = good_body(drawn(observation), drawn(sample), mask_size(sample), np.random.default_rng(0))
    body["action_mask"][1][2] = [0, 1, 1, 0, True]  # 0/1 pass as the per-value rule lets them
    body["sample"][1][2] = [1, 0]  # one the mask allows
    monkeypatch.setattr("shepherd.wire.experience.checked_experience", _never)
    experience = parse_experience(body, ExperienceSpaces(observation, sample, sample, _never), N, T)
    masks = experience.action_mask
    assert masks is not None and masks.shape == (T + 1, N, 5)
    assert masks.dtype == bool and masks[1, 2].tolist() == [False, True, True, False, True]


def test_dict_observations_take_the_column_path(monkeypatch):
    observation, sample, _ = CASES["dict obs"]
    body = good_body(drawn(observation), drawn(sample), 0, np.random.default_rng(0))
    monkeypatch.setattr("shepherd.wire.experience.checked_experience", _never)
    experience = parse_experience(body, ExperienceSpaces(observation, sample), N, T)
    assert list(experience.obs) == ["a", "b"]
    assert experience.obs["a"].shape == (T + 1, N, 2) and experience.obs["a"].dtype == np.float32
    assert experience.obs["b"].shape == (T + 1, N) and experience.obs["b"].dtype == np.int64



def test_image_observations_take_the_column_path_as_uint8(monkeypatch):
    observation, sample, _ = CASES["pixel obs"]
    body = good_body(drawn(observation), drawn(sample), 0, np.random.default_rng(0))
    monkeypatch.setattr("shepherd.wire.experience.checked_experience", _never)
    experience = parse_experience(body, ExperienceSpaces(observation, sample), N, T)
    assert experience.obs.shape == (T + 1, N, 2, 3, 2) and experience.obs.dtype == np.uint8
    assert experience.obs[2, 1].tolist() == body["obs"][2][1]
