"""Algorithm parameters: read from SB3's signatures, checked against their types."""

import pytest

from shepherd.agents import ParameterError, check_parameters, parameters
from shepherd.agents.registry import ParamType, registry_records


def test_parameters_are_typed_from_sb3():
    ppo = parameters("PPO")
    assert ppo["n_steps"].type is ParamType.INT and ppo["n_steps"].default == 2048
    assert ppo["gamma"].type is ParamType.FLOAT
    assert ppo["normalize_advantage"].type is ParamType.BOOL
    assert ppo["learning_rate"].schedule and ppo["target_kl"].nullable
    assert ppo["policy_kwargs"].type is ParamType.JSON
    assert "n_envs" in ppo and "env" not in ppo and "verbose" not in ppo
    assert "n_steps" not in parameters("DQN")  # n-step returns would mix clients


def test_values_are_converted_to_their_type():
    checked = check_parameters("ppo", {"normalize_advantage": "False", "n_steps": "32", "gamma": "0.9",
                                       "learning_rate": "lin_0.001", "batch_size": 64.0,
                                       "policy_kwargs": '{"net_arch": [8]}'})
    assert checked == {"normalize_advantage": False, "n_steps": 32, "gamma": 0.9, "learning_rate": "lin_0.001",
                       "batch_size": 64, "policy_kwargs": {"net_arch": [8]}}


@pytest.mark.parametrize("values, words", [
    ({"nope": 1}, "has no parameter 'nope'"),
    ({"n_steps": 3.5}, "'n_steps' must be an integer"),
    ({"n_steps": True}, "'n_steps' must be an integer"),
    ({"gamma": "high"}, "'gamma' must be a number"),
    ({"normalize_advantage": "maybe"}, "must be a boolean"),
    ({"learning_rate": "lin_x"}, "lin_<start>"),
    ({"gamma": None}, "cannot be null"),
])
def test_bad_values_name_the_parameter(values, words):
    with pytest.raises(ParameterError, match=words.replace("(", r"\(")):
        check_parameters("PPO", values)


def test_unknown_algorithm():
    with pytest.raises(ParameterError, match="unknown algorithm 'XYZ'; available: PPO, DQN"):
        parameters("XYZ")


def test_registry_records_carry_the_continuous_flag():
    algorithms, params = registry_records()
    assert {a["name"]: a["continuous"] for a in algorithms} == {"PPO": True, "DQN": False}
    assert all(p["type"] in (1, 2, 3, 4, 5) for p in params)
