"""The JSON space syntax and the checks of observations and actions."""

import math

import numpy as np
import pytest
from gymnasium import spaces

from shepherd.wire.observations import check_observation
from shepherd.wire.spaces import SpaceError, action_from_json, action_to_json, parse_space, space_to_json


def test_integer_is_discrete():
    assert parse_space(2) == spaces.Discrete(2)


def test_box_from_the_seed_syntax_with_float32_extremes():
    space = parse_space([[4], -3.4028234663852886e+38, 3.4028234663852886e+38])
    assert isinstance(space, spaces.Box) and space.shape == (4,) and space.dtype == np.float32
    assert np.all(np.isfinite(space.low)) and np.all(space.high == np.finfo(np.float32).max)


def test_box_with_infinite_and_per_dimension_bounds_round_trips():
    spec = [[2], [0.0, "-inf"], [1.0, "inf"]]
    space = parse_space(spec)
    assert math.isinf(space.low[1]) and space.low[1] < 0
    assert space_to_json(space) == spec
    assert parse_space(space_to_json(parse_space([[3, 2], "-inf", "inf"]))).shape == (3, 2)


def test_object_is_a_dict_space():
    space = parse_space({"camera": [[8, 8, 3], 0, 255], "mode": 3})
    assert isinstance(space, spaces.Dict) and set(space.spaces) == {"camera", "mode"}


@pytest.mark.parametrize("spec, words", [
    (0, "at least 1"), (True, "boolean"), ([[4], 0], "[shape, low, high]"), ([[0], 0, 1], "positive"),
    ([[2], 1, 0], "above"), ([[2], "x", 1], "not a number"), ({}, "at least one"), ("2", "expected"),
    ({"a": {"b": 2}}, "nested"), ([[2], [0, 1, 2], 1], "shape"),
])
def test_bad_specs_are_refused_with_a_reason(spec, words):
    with pytest.raises(SpaceError, match=words.replace("[", r"\[").replace("]", r"\]")):
        parse_space(spec)


def test_box_observation_is_checked_for_shape_type_and_finiteness():
    space = parse_space([[4], "-inf", "inf"])
    obs = check_observation(space, [1, 2.5, -3, 4])
    assert obs.dtype == np.float32 and obs.tolist() == [1, 2.5, -3, 4]
    with pytest.raises(SpaceError, match=r"shape \[3\], expected \[4\]"):
        check_observation(space, [1, 2, 3])
    with pytest.raises(SpaceError, match="only numbers"):
        check_observation(space, [1, 2, "3", 4])
    with pytest.raises(SpaceError, match="ragged"):
        check_observation(space, [[1, 2], [3]])
    with pytest.raises(SpaceError, match="NaN or infinity"):
        check_observation(space, [1, 2, 3, float("nan")])
    with pytest.raises(SpaceError, match="too large for float32"):
        check_observation(space, [1, 2, 3, 1e300])
    with pytest.raises(SpaceError, match="must be a list"):
        check_observation(space, {"a": 1})


def test_discrete_and_dict_observations():
    assert check_observation(parse_space(3), 2) == 2
    with pytest.raises(SpaceError, match="outside"):
        check_observation(parse_space(3), 3)
    with pytest.raises(SpaceError, match="integer"):
        check_observation(parse_space(3), True)
    space = parse_space({"a": [[2], 0, 1], "b": 2})
    checked = check_observation(space, {"a": [0.5, 0.5], "b": 1})
    assert checked["a"].shape == (2,) and checked["b"] == 1
    with pytest.raises(SpaceError, match=r"missing \['b'\], unknown \['c'\]"):
        check_observation(space, {"a": [0, 0], "c": 1})
    with pytest.raises(SpaceError, match=r"obs\.a has shape"):
        check_observation(space, {"a": [0], "b": 1})


def test_actions_to_and_from_json():
    assert action_to_json(spaces.Discrete(2), np.array([1])) == 1
    box = spaces.Box(-1, 1, (2, 2), np.float32)
    as_json = action_to_json(box, np.arange(4, dtype=np.float32))
    assert as_json == [[0.0, 1.0], [2.0, 3.0]]
    assert action_from_json(box, as_json).shape == (2, 2)
    assert action_to_json(spaces.MultiDiscrete([3, 3]), np.array([2, 1])) == [2, 1]
    assert action_from_json(spaces.Discrete(2), 1) == 1


@pytest.mark.parametrize("spec, space", [
    (["MultiDiscrete", [3, 4]], spaces.MultiDiscrete([3, 4])),
    (["MultiBinary", 4], spaces.MultiBinary(4)),
    (["MultiBinary", [2, 3]], spaces.MultiBinary([2, 3])),
])
def test_multi_discrete_and_multi_binary_round_trip(spec, space):
    parsed = parse_space(spec)
    assert parsed == space
    assert space_to_json(parsed) == spec
    assert parse_space(space_to_json(parsed)) == space


@pytest.mark.parametrize("spec, words", [
    (["MultiDiscrete", []], "list of positive integers"), (["MultiDiscrete", [3, 0]], "list of positive"),
    (["MultiDiscrete", 3], "list of positive"), (["MultiBinary", 0], "positive integer"),
    (["MultiBinary", [2, True]], "positive integer"), (["Tuple", [2]], "unknown space 'Tuple'"),
])
def test_bad_multi_specs_are_refused(spec, words):
    with pytest.raises(SpaceError, match=words):
        parse_space(spec)


def test_multi_discrete_and_multi_binary_observations_and_actions():
    multi = parse_space(["MultiDiscrete", [3, 4]])
    assert check_observation(multi, [2, 3]).tolist() == [2, 3]
    for bad, words in (([3, 0], "outside its range"), ([1], "shape"), ([1.5, 0], "integers"), (2, "list")):
        with pytest.raises(SpaceError, match=words):
            check_observation(multi, bad)
    binary = parse_space(["MultiBinary", [2, 2]])
    assert check_observation(binary, [[0, 1], [1, 1]]).shape == (2, 2)
    with pytest.raises(SpaceError, match="outside its range"):
        check_observation(binary, [[0, 2], [1, 1]])
    assert action_to_json(binary, np.array([1.0, 0.0, 0.0, 1.0], dtype=np.float32)) == [[1, 0], [0, 1]]
    assert action_to_json(spaces.MultiBinary(3), np.array([[1, 0, 1]])) == [1, 0, 1]
    assert action_from_json(multi, [2, 1]).tolist() == [2, 1]


@pytest.mark.parametrize("spec, words", [
    (100_000, "100,000 discrete values"),
    ([[1 << 30], 0, 1], "1,073,741,824 numbers in a box"),
    ([[4096, 4096, 3], 0, 255], "numbers in a box"),
    (["MultiDiscrete", [40_000, 40_000]], "80,000 discrete values in all"),
    (["MultiBinary", [300, 300]], "90,000 binary values"),
])
def test_spaces_too_large_to_serve_are_refused_before_anything_is_allocated(spec, words):
    with pytest.raises(SpaceError, match=words):
        parse_space(spec)


def test_an_image_is_a_uint8_box_that_round_trips_with_its_channel_order():
    last, first = parse_space(["Image", [6, 5, 3]]), parse_space(["Image", [6, 5, 3], "channels_first"])
    assert last.shape == (6, 5, 3) and first.shape == (3, 6, 5)
    assert last.dtype == first.dtype == np.uint8 and last.low.min() == 0 and last.high.max() == 255
    assert space_to_json(last) == ["Image", [6, 5, 3]]
    assert space_to_json(first) == ["Image", [6, 5, 3], "channels_first"]
    assert parse_space(["Image", [6, 5, 3], "channels_last"]) == last != first
    assert space_to_json(parse_space({"eye": ["Image", [6, 5, 3]], "v": 2})) == {"eye": ["Image", [6, 5, 3]], "v": 2}


def test_an_image_observation_is_integers_0_to_255_in_its_layout():
    first = parse_space(["Image", [2, 3, 1], "channels_first"])
    value = [[[0, 255, 7], [1, 2, 3]]]  # [C][H][W]
    checked = check_observation(first, value)
    assert checked.dtype == np.uint8 and checked.tolist() == value
    camera = parse_space({"camera": ["Image", [2, 3, 1]], "speed": [[1], -1, 1]})
    found = check_observation(camera, {"camera": [[[1], [2], [3]], [[4], [5], [6]]], "speed": [0.5]})
    assert found["camera"].dtype == np.uint8 and found["camera"].shape == (2, 3, 1)


@pytest.mark.parametrize("value, words", [
    ([[[0, 256, 7], [1, 2, 3]]], "obs[0][0][1] is 256, outside 0-255"),
    ([[[0, -1, 7], [1, 2, 3]]], "obs[0][0][1] is -1, outside 0-255"),
    ([[[0, 1.5, 7], [1, 2, 3]]], "only integers 0-255"),
    ([[[False, True, True], [True, True, True]]], "only integers 0-255"),
    ([[[0, 1, 7]], [[1, 2, 3]]], "shape [2, 1, 3], expected an image of shape [1, 2, 3] (channels first)"),
    ([[[0, 1, 7], [1, 2]]], "ragged"),
    (5, "must be an image"),
])
def test_a_bad_image_observation_is_named(value, words):
    with pytest.raises(SpaceError) as error:
        check_observation(parse_space(["Image", [2, 3, 1], "channels_first"]), value)
    assert words in str(error.value)


@pytest.mark.parametrize("spec, words", [
    (["Image", [4, 4]], "three positive integers"), (["Image", [4, 0, 3]], "three positive integers"),
    (["Image", [4, 4, 3], "sideways"], "channel order"), (["Image"], "an image is"),
    (["Image", [1024, 1024, 3]], "more than Shepherd serves"),
])
def test_bad_image_specs_are_refused(spec, words):
    with pytest.raises(SpaceError) as error:
        parse_space(spec)
    assert words in str(error.value)
