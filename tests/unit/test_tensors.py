"""Binary tensors in the client protocol's bodies (`shepherd.wire.tensors`, docs/protocol.md "Binary tensors"): the
layout read back exactly, every size that does not add up refused, and the parsers taking the arrays as they take
the JSON lists they stand for (the same checked values, the same digests)."""

import json

import numpy as np
import pytest

from shepherd.client.tensors import encode, observation_numbers
from shepherd.wire import BadRequest, parse_object, parse_step, parse_vector_step
from shepherd.wire.experience import ExperienceSpaces, parse_experience
from shepherd.wire.spaces import check_action_mask, parse_space
from shepherd.wire.tensors import decode, json_length
from tests.binary_bodies import as_tensors

FIELDS = {"session_key", "obs", "reward", "done", "seq", "action_mask", "terminated", "truncated", "final_obs"}


def no_mask(value, space, where):
    raise AssertionError("no mask here")


def body(header: dict, *chunks: bytes) -> tuple[bytes, int]:
    text = json.dumps(header).encode()
    return text + b"".join(chunks), len(text)


def test_the_layout_is_read_back_in_document_order_little_endian_and_row_major():
    image = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    floats = np.array([[1.5, -2.0], [3.25, 1e-3]], dtype="<f4")
    data, length = body({"a": {"datatype": "UINT8", "shape": [2, 3, 4], "binary_data_size": 24},
                         "b": [{"datatype": "FP32", "shape": [2, 2], "binary_data_size": 16}, 7],
                         "c": {"datatype": "BOOL", "shape": [3], "binary_data_size": 3},
                         "d": {"datatype": "INT64", "shape": [], "binary_data_size": 8},
                         "e": {"datatype": "FP64", "shape": [0], "binary_data_size": 0}},
                        image.tobytes(), floats.tobytes(), bytes([1, 0, 1]), (-5).to_bytes(8, "little", signed=True))
    decoded = decode(data, length)
    assert decoded["a"].dtype == np.uint8 and (decoded["a"] == image).all()
    assert (decoded["b"][0] == floats).all() and decoded["b"][1] == 7
    assert decoded["c"].tolist() == [True, False, True] and decoded["d"].tolist() == -5
    assert decoded["e"].shape == (0,) and decoded["e"].dtype == np.float64


@pytest.mark.parametrize("header, chunks, words", [
    ({"obs": {"datatype": "FP32", "shape": [2], "binary_data_size": 8}}, [b"\0" * 7], "bytes before its tensors"),
    ({"obs": {"datatype": "FP32", "shape": [2], "binary_data_size": 8}}, [b"\0" * 9], "1 bytes after"),
    ({"obs": [1, 2]}, [b"\0"], "1 bytes after"),
    ({"obs": {"datatype": "FP32", "shape": [2], "binary_data_size": 4}}, [b"\0" * 4], "has 8 bytes"),
    ({"obs": {"datatype": "FP16", "shape": [2], "binary_data_size": 4}}, [b"\0" * 4], "unknown tensor datatype"),
    ({"obs": {"datatype": "UINT8", "shape": [2, -1], "binary_data_size": 0}}, [], "list of whole numbers"),
    ({"obs": {"datatype": "UINT8", "shape": [True], "binary_data_size": 1}}, [b"\0"], "list of whole numbers"),
    ({"obs": {"datatype": "UINT8", "shape": [1], "binary_data_size": "1"}}, [b"\0"], "whole number of bytes"),
    ({"obs": {"datatype": "UINT8", "shape": [1], "binary_data_size": 1, "name": "x"}}, [b"\0"], "exactly"),
    ({"obs": {"datatype": "BOOL", "shape": [2], "binary_data_size": 2}}, [b"\1\2"], "0 or 1"),
])
def test_sizes_that_do_not_add_up_and_malformed_descriptions_are_refused(header, chunks, words):
    data, length = body(header, *chunks)
    with pytest.raises(BadRequest) as caught:
        decode(data, length)
    assert words in str(caught.value)


def test_a_header_beyond_the_body_or_not_a_number_and_json_that_is_not_json_are_refused():
    with pytest.raises(BadRequest, match="says 100 bytes of JSON, but the body has 2"):
        decode(b"{}", 100)
    with pytest.raises(BadRequest, match="not valid JSON"):
        decode(b'{"obs": [1,', 9)
    for text in ("-1", "12a", "", " 1.5", "\u0661"):
        with pytest.raises(BadRequest, match="Inference-Header-Content-Length"):
            json_length(text)
    assert json_length(" 17 ") == 17 and json_length(None) is None


def parsed(data: dict, binary: bool) -> dict:
    if not binary:
        return parse_object(json.dumps(data).encode(), FIELDS)
    raw, length = encode(as_tensors(data))
    return parse_object(raw, FIELDS, length)


@pytest.mark.parametrize("spec, obs", [
    ([[4], "-inf", "inf"], [0.1, -2.0, 3.0, 1e30]),
    ([[2, 3, 2], 0, 255], np.arange(12).reshape(2, 3, 2).tolist()),
    (5, 3),
    (["MultiDiscrete", [3, 2]], [2, 1]),
    ({"pos": [[2], -1, 1], "cell": 4}, {"pos": [0.5, -0.25], "cell": 2}),
])
def test_a_binary_step_parses_to_the_json_steps_values_and_digest(spec, obs):
    space = parse_space(spec)
    data = {"session_key": "k", "obs": obs, "reward": 1.0, "done": False, "seq": 3}
    from_json, from_binary = (parse_step(parsed(data, binary), space, None, no_mask) for binary in (False, True))
    assert from_json.digest() == from_binary.digest()  # a retry in the other encoding is the same step
    assert from_binary.reward == 1.0 and from_binary.seq == 3
    vector = {"session_key": "k", "obs": [obs, obs], "reward": [0.5, 1.0], "terminated": [True, False],
              "truncated": [False, False], "final_obs": [obs, None], "seq": 4}
    steps = [parse_vector_step(parsed(vector, binary), space, 2, None, no_mask) for binary in (False, True)]
    assert steps[0].digest() == steps[1].digest() and steps[1].envs.ended == [True, False]


def test_an_image_observation_as_uint8_bytes_is_the_json_observation():
    space = parse_space([[84, 84, 4], 0, 255])
    frame = np.random.default_rng(0).integers(0, 256, (84, 84, 4), dtype=np.uint8)
    raw, length = encode({"session_key": "k", "obs": frame, "reward": 0.0, "done": False})
    step = parse_step(parse_object(raw, FIELDS, length), space, None, no_mask)
    assert len(raw) - length == frame.size  # one byte a number, against ~3.6 of JSON
    assert step.obs.dtype == np.float32 and (step.obs == frame.astype(np.float32)).all()
    assert step.obs.flags.writeable  # a copy: the learner may normalise it in place


def test_masks_as_tensors_are_checked_by_the_json_rule():
    space = parse_space(4)
    assert check_action_mask(space, np.array([True, False, True, False])).tolist() == [True, False, True, False]
    assert check_action_mask(space, np.array([0, 1, 0, 0])).tolist() == [False, True, False, False]
    for bad, words in ((np.array([0, 2, 0, 0]), r"action_mask\[1\] must be true or false"),
                       (np.array([False] * 4), "masks out every action"), (np.array([True] * 3), "got 3 items")):
        with pytest.raises(ValueError, match=words):
            check_action_mask(space, bad)


@pytest.mark.parametrize("spec, sample, mask", [
    ([[3, 3, 1], 0, 255], 2, None),
    ([[4], "-inf", "inf"], ["MultiDiscrete", [3, 2]], True),
    ({"pos": [[2], -1, 1], "cell": 4}, 3, None),
])
def test_a_binary_upload_takes_the_column_path_to_the_json_uploads_experience(spec, sample, mask, monkeypatch):
    from shepherd.wire.spaces import check_action_mask as rule

    observation, samples = parse_space(spec), parse_space(sample)
    checks = ExperienceSpaces(observation, samples, samples if mask else None, (lambda v, s, w: rule(s, v, w))
                              if mask else None)
    rng, steps, n = np.random.default_rng(1), 3, 2

    def draw(space):
        value = space.sample()
        return {k: v.tolist() for k, v in value.items()} if isinstance(value, dict) else np.asarray(value).tolist()

    data = {"session_key": "k", "policy_version": 0, "seq": 1,
            "obs": [[draw(observation) for _ in range(n)] for _ in range(steps + 1)],
            "sample": [[draw(samples) for _ in range(n)] for _ in range(steps)],
            "reward": rng.normal(size=(steps, n)).tolist(), "terminated": [[False, True], [False] * 2, [False] * 2],
            "truncated": [[False] * 2] * steps, "final_obs": [[None, draw(observation)], [None] * 2, [None] * 2]}
    if mask:
        data["action_mask"] = [[[True] * 5] * n] * (steps + 1)
    fields = set(data)
    raw, length = encode(as_tensors(data))
    monkeypatch.setattr("shepherd.wire.experience.checked_experience", None)  # both take the column path
    from_binary = parse_experience(parse_object(raw, fields, length), checks, n, steps)
    from_json = parse_experience(parse_object(json.dumps(data).encode(), fields), checks, n, steps)
    assert from_json.digest() == from_binary.digest()


def test_observation_numbers_say_when_a_client_sends_binary():
    assert observation_numbers([[84, 84, 4], 0, 255]) == 28224 and observation_numbers([[4], "-inf", "inf"]) == 4
    assert observation_numbers({"a": [[2, 3], 0, 1], "b": 5}) == 7
    assert observation_numbers(["MultiDiscrete", [3, 2, 2]]) == 3 and observation_numbers(["MultiBinary", [4, 4]]) == 16
