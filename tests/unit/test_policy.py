"""shepherd.policies.onnx: an exported policy file read with onnxruntime, acting as the server answers; its errors."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from onnx import helper

from shepherd.policies.onnx import Policy, PolicyError
from tests.conftest import ROOT
from tests.onnx_policies import (cartpole_controller, dict_discrete, linear_box, linear_discrete, masked_discrete,
                                 metadata, save)

RNG = np.random.default_rng(0)
CARTPOLE_WEIGHTS = np.array([[0.0, 0.0], [0.0, 0.5], [0.0, 10.0], [0.0, 1.0]], dtype=np.float32)


def test_a_discrete_policy_acts_as_numpy_computes(tmp_path):
    path, compute = linear_discrete(tmp_path / "p.onnx", RNG.normal(size=(4, 3)), RNG.normal(size=3))
    policy = Policy.load(path)
    observations = RNG.normal(size=(1000, 4)).astype(np.float32)
    expected = compute(observations).tolist()
    batch = policy.act_batch(observations.tolist())
    assert batch == expected
    singles = [policy.act(row.tolist()) for row in observations[:100]]
    assert singles == expected[:100]
    assert all(type(action) is int for action in singles)  # as the server's JSON carries it
    assert policy.act(observations[0]) == expected[0]  # numpy in, too
    assert policy.act_batch(observations[:5]) == expected[:5]


def test_a_box_policy_acts_as_numpy_computes_within_its_bounds(tmp_path):
    path, compute = linear_box(tmp_path / "p.onnx", RNG.normal(size=(3, 2)) * 3, RNG.normal(size=2),
                               [-1.0, 0.0], [1.0, 2.0])
    policy = Policy.load(path)
    observations = RNG.normal(size=(1000, 3)).astype(np.float32) * 4
    actions = policy.act_batch(observations.tolist())
    assert isinstance(actions[0], list) and isinstance(actions[0][0], float)
    assert np.max(np.abs(np.array(actions) - compute(observations))) <= 1e-6
    assert np.all(np.array(actions) >= [-1.0, 0.0]) and np.all(np.array(actions) <= [1.0, 2.0])
    assert policy.act(observations[3].tolist()) == actions[3]


def test_masks_are_passed_and_default_to_all_allowed(tmp_path):
    weights, bias = RNG.normal(size=(3, 4)), RNG.normal(size=4)
    path, compute = masked_discrete(tmp_path / "p.onnx", weights, bias)
    policy = Policy.load(path)
    assert policy.takes_masks and policy.mask_size == 4
    observations = RNG.normal(size=(200, 3)).astype(np.float32)
    masks = RNG.random(size=(200, 4)) < 0.5
    masks[:, 0] = True  # at least one action stays allowed
    assert policy.act_batch(observations.tolist(), masks.tolist()) == compute(observations, masks).tolist()
    assert policy.act_batch(observations.tolist()) == compute(observations, np.ones((200, 4), bool)).tolist()
    assert policy.act(observations[0].tolist(), [0, 0, 1, 0]) == 2


def test_a_dict_observation_feeds_one_input_per_key(tmp_path):
    path, compute = dict_discrete(tmp_path / "p.onnx")
    policy = Policy.load(path)
    positions = RNG.normal(size=(50, 2)).astype(np.float32)
    cells = RNG.integers(0, 3, size=50)
    observations = [{"position": p.tolist(), "cell": int(c)} for p, c in zip(positions, cells)]
    assert policy.act_batch(observations) == compute(positions, cells).tolist()
    assert policy.act({"position": positions[1], "cell": np.int64(cells[1])}) == compute(positions, cells)[1]


def test_the_metadata_is_there(tmp_path):
    path, _ = cartpole_controller(tmp_path / "p.onnx", policy_version=12, filters={"normalize": True})
    policy = Policy.load(path)
    assert (policy.agent, policy.algorithm, policy.policy_version) == ("cartpole", "PPO", 12)
    assert policy.filters == {"normalize": True}
    assert policy.observation_space.shape == (4,) and policy.action_space.n == 2
    assert policy.metadata["format"] == 1 and policy.mask_size is None and not policy.takes_masks
    assert "cartpole" in repr(policy)


def test_onnxruntime_runs_on_one_thread_by_default(tmp_path):
    path, _ = cartpole_controller(tmp_path / "p.onnx")
    assert Policy.load(path)._session.get_session_options().intra_op_num_threads == 1
    assert Policy.load(path, threads=2)._session.get_session_options().intra_op_num_threads == 2


def _error(call) -> str:
    with pytest.raises(PolicyError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_missing_or_damaged_file_is_refused(tmp_path):
    assert "cannot read the policy file" in _error(lambda: Policy.load(tmp_path / "none.onnx"))
    path, _ = cartpole_controller(tmp_path / "p.onnx")
    data = path.read_bytes()
    for name, content in (("garbage", b"\x08\x07not a model at all" * 20), ("empty", b""),
                          ("cut", data[:len(data) // 2])):
        damaged = tmp_path / f"{name}.onnx"
        damaged.write_bytes(content)
        assert "is damaged" in _error(lambda: Policy.load(damaged)), name


def test_a_foreign_onnx_file_is_not_a_shepherd_policy(tmp_path):
    nodes = [helper.make_node("Identity", ["observation"], ["action"])]
    io = [helper.make_tensor_value_info(name, 1, ["batch", 4]) for name in ("observation", "action")]
    foreign = save(tmp_path / "foreign.onnx", nodes, io[:1], io[1:], [], None)
    assert "not a Shepherd policy" in _error(lambda: Policy.load(foreign))
    assert "format 1" in _error(lambda: Policy.load(save(
        tmp_path / "future.onnx", nodes, io[:1], io[1:], [], metadata([[4], -1, 1], [[4], -1, 1], format=2))))
    # the metadata's spaces and the graph's inputs must agree
    wrong = save(tmp_path / "wrong.onnx", nodes, io[:1], io[1:], [], metadata([[4], -1, 1], 2, takes_masks=True))
    assert "inputs are ['observation']" in _error(lambda: Policy.load(wrong))
    bad_space = save(tmp_path / "bad.onnx", nodes, io[:1], io[1:], [], metadata("nonsense", 2))
    assert "spaces are invalid" in _error(lambda: Policy.load(bad_space))


def test_a_file_whose_metadata_disagrees_with_its_graph_is_refused_at_load(tmp_path):
    """Names and types agree, shapes do not: each step would have been a 500 from onnxruntime."""
    import onnx

    good, _ = linear_discrete(tmp_path / "good.onnx", CARTPOLE_WEIGHTS, np.zeros(2, dtype=np.float32))
    assert Policy.load(good).act([0, 0, 0.1, 0]) == 1
    for name, spaces_, words in (
            ("obs", ([[8], "-inf", "inf"], 2), "its graph does not take observations of its metadata's"),
            ("box", ([[4], "-inf", "inf"], [[3], -1, 1]), "its graph's actions (shape [2] for 2 observations) do "
                                                          "not fit its metadata's action space"),
            ("range", ([[4], 100, 101], 1), "do not fit its metadata's action space 1")):
        model = onnx.load(str(good))
        del model.metadata_props[:]
        helper.set_model_props(model, {"shepherd": json.dumps(metadata(*spaces_))})
        path = tmp_path / f"{name}.onnx"
        onnx.save(model, str(path))
        message = _error(lambda: Policy.load(path))
        assert words in message and "\n" not in message, (name, message)


def test_an_observation_that_does_not_fit_names_the_space(tmp_path):
    policy = Policy.load(cartpole_controller(tmp_path / "p.onnx")[0])
    for observation, words in (([0.1, 0.2, 0.3], "shape [3], expected [4]"), ("up", "list of numbers"),
                               ([0.1, float("nan"), 0, 0], "NaN"), ({"a": 1}, "list of numbers")):
        message = _error(lambda: policy.act(observation))
        assert words in message and '[[4], "-inf", "inf"]' in message
    assert "observations[1] has shape [2]" in _error(lambda: policy.act_batch([[0, 0, 0, 0], [0, 0]]))
    assert "a list of observations" in _error(lambda: policy.act_batch(5))


def test_a_mask_that_does_not_fit_is_refused(tmp_path):
    masked = Policy.load(masked_discrete(tmp_path / "m.onnx", RNG.normal(size=(3, 4)), np.zeros(4))[0])
    assert "4" in _error(lambda: masked.act([0, 0, 0], [True, False]))
    assert "masks[1]" in _error(lambda: masked.act_batch([[0, 0, 0]] * 2, [[1, 1, 1, 1], [1]]))
    assert "one mask per observation" in _error(lambda: masked.act_batch([[0, 0, 0]] * 2, [[1, 1, 1, 1]]))
    plain = Policy.load(cartpole_controller(tmp_path / "p.onnx")[0])
    assert "takes no action mask" in _error(lambda: plain.act([0, 0, 0, 0], [True, True]))


@pytest.mark.e2e  # starts another process
def test_reading_a_policy_never_imports_torch(tmp_path):
    path, _ = cartpole_controller(tmp_path / "p.onnx")
    code = ("import sys, json; from shepherd.policies.onnx import Policy; "
            f"print(Policy.load({str(path)!r}).act([0, 0, 0.1, 0])); "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'stable_baselines3', "
            "'sb3_contrib') or m.startswith(('shepherd.agents', 'shepherd.graph', 'shepherd.http')))))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    action, modules = result.stdout.splitlines()
    assert action == "1" and json.loads(modules) == []
