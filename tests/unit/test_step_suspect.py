"""Where a step is checked, the wire notes whether an observation holds a number beyond `SUSPECT_MAGNITUDE`
(``suspect``): only such a step is put to the learners' networks before the session counts it
(`Session._refuse_unbounded`). A vector step's rows are looked at in the one array they are checked in, in JSON and
binary bodies alike, its ended envs' last observations too."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shepherd.client.tensors import encode
from shepherd.wire import parse_object, parse_step, parse_vector_step
from shepherd.wire.parse import STEP_FIELDS
from shepherd.wire.observations import check_observation_rows
from shepherd.wire.spaces import parse_space
from tests.binary_bodies import as_tensors

SPECS = {
    "box": ([[4], "-inf", "inf"], [0.0, 1.0, -2.0, 3.0], [0.0, 1.0, -2e7, 3.0]),
    "grid": ([[2, 2], "-inf", "inf"], [[0.0, 1.0], [2.0, 3.0]], [[0.0, 1.0], [2.0, 3e30]]),
    "dict": ({"pos": [[2], "-inf", "inf"], "cell": 4}, {"pos": [0.5, 0.25], "cell": 2},
             {"pos": [0.5, 1e9], "cell": 2}),
}


def no_mask(value, space, where):
    return None


def parsed(data: dict, binary: bool) -> dict:
    if not binary:
        return parse_object(json.dumps(data).encode(), STEP_FIELDS)
    raw, length = encode(as_tensors(data))
    return parse_object(raw, STEP_FIELDS, length)


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
@pytest.mark.parametrize("name", SPECS)
def test_a_step_is_suspect_exactly_when_an_observation_holds_a_number_beyond_a_million(name, binary):
    spec, sane, wild = SPECS[name]
    space = parse_space(spec)
    for obs, expected in ((sane, False), (wild, True)):
        step = parse_step(parsed({"obs": obs, "reward": 0.0}, binary), space, None, no_mask)
        assert step.suspect is expected
    for rows, finals, expected in (([sane, sane, sane], None, False), ([sane, wild, sane], None, True),
                                   ([sane, sane, sane], [None, wild, None], True)):
        body = {"obs": rows, "reward": [0.0] * 3, "terminated": [finals is not None and i == 1 for i in range(3)],
                "truncated": [False] * 3}
        if finals is not None:
            body["final_obs"] = finals
        step = parse_vector_step(parsed(body, binary), space, 3, None, no_mask)
        assert step.suspect is expected, (rows, finals)


def test_the_rows_of_one_array_are_looked_at_at_once():
    space = parse_space([[3], "-inf", "inf"])
    rows = np.zeros((64, 3), np.float32)
    assert check_observation_rows(space, rows).suspect is False
    rows[40, 2] = -1.5e6
    checked = check_observation_rows(space, rows)
    assert checked.suspect is True and len(checked.rows) == 64 and checked.rows[40][2] == np.float32(-1.5e6)
    assert check_observation_rows(space, rows.tolist()).suspect is True
    image = parse_space(["Image", [4, 4, 1]])
    assert check_observation_rows(image, np.full((2, 4, 4, 1), 255, np.uint8)).suspect is False


def test_a_binary_vector_step_of_a_discrete_space_takes_its_final_observations_as_one_tensor():
    """A binary body's column of integers arrives as numpy integers, which a Discrete observation refused (only
    Python's int passed): a vector step whose every env ended was a 400."""
    body = {"obs": [0, 1], "reward": [0.0, 0.0], "terminated": [True, True], "truncated": [False, False],
            "final_obs": [3, 4]}
    step = parse_vector_step(parsed(body, True), parse_space(5), 2, None, no_mask)
    assert [int(obs) for obs in step.envs.final_obs] == [3, 4] and step.envs.ended == [True, True]
