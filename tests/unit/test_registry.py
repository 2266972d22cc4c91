"""Algorithm parameters: read from SB3's signatures, checked against their types; spaces per algorithm."""

import numpy as np
import pytest
from gymnasium import spaces as gym_spaces
from stable_baselines3.common.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise

from shepherd.definition import AgentDefinition
from shepherd.agents import (ALGORITHMS, ParameterError, ParamType, check_agent, check_parameters, check_spaces,
                             parameters, registry_records, sb3_arguments)
from shepherd.agents.parameters import LinearSchedule
from shepherd.wire.spaces import parse_space

BOX1 = parse_space([[1], -2, 2])


def test_the_six_and_the_contrib_algorithms():
    assert [a.name for a in ALGORITHMS.values()] == ["PPO", "A2C", "DQN", "SAC", "TD3", "DDPG", "QRDQN", "TQC",
                                                      "CrossQ", "TRPO", "MaskablePPO", "RecurrentPPO"]
    assert {a.package for a in list(ALGORITHMS.values())[6:]} == {"sb3-contrib"}


def test_an_algorithm_is_one_registration_and_names_match_in_any_case():
    from stable_baselines3 import PPO
    from shepherd.agents.sb3.on_policy import OnPolicyAdapter
    from shepherd.agents.registry import Algorithm, register

    assert parameters("crossq") == parameters("CrossQ")
    with pytest.raises(ValueError, match="already registered"):
        register(Algorithm("ppo", PPO, OnPolicyAdapter, (gym_spaces.Discrete,)))
    with pytest.raises(ValueError, match="not an SB3Algorithm adapter"):
        register(Algorithm("Other", PPO, object, (gym_spaces.Discrete,)))  # type: ignore[arg-type]
    assert "Other" not in [a.name for a in ALGORITHMS.values()]


def test_the_catalog_and_the_policies_agree_on_which_take_masks():
    """A step may carry a mask (the catalog's ``masks``) exactly where the policy's snapshot and files take one."""
    from shepherd.agents.greedy_policy import policy_takes_masks

    masked = {a.name for a in ALGORITHMS.values() if a.masks}
    assert masked == {"DQN", "QRDQN", "MaskablePPO"}
    for algorithm in ALGORITHMS.values():
        if algorithm.learner is None:
            for policy in algorithm.policies[:2 if algorithm.dict_observations else 1]:
                assert policy_takes_masks(algorithm.sb3_class.policy_aliases[policy]) == algorithm.masks, (
                    algorithm.name, policy)


def test_ars_is_not_served_and_says_why():
    with pytest.raises(ParameterError, match="ARS is not served: ARS learns from the returns of whole episodes"):
        parameters("ARS")


def test_parameter_types_are_numbered_as_in_the_seed():
    # user guide 1.1.5: 1 integer, 2 float; value columns value_int, value_float, value_bool, value_str
    assert [(t.name, t.value) for t in ParamType] == [("INT", 1), ("FLOAT", 2), ("BOOL", 3), ("STR", 4),
                                                       ("JSON", 5)]


def test_parameters_are_typed_from_sb3():
    ppo = parameters("PPO")
    assert ppo["n_steps"].type is ParamType.INT and ppo["n_steps"].default == 2048
    assert ppo["gamma"].type is ParamType.FLOAT
    assert ppo["normalize_advantage"].type is ParamType.BOOL
    assert ppo["learning_rate"].schedule and ppo["target_kl"].nullable
    assert ppo["policy_kwargs"].type is ParamType.JSON
    assert "n_envs" in ppo and "env" not in ppo and "verbose" not in ppo
    assert "clipping" in ppo["clip_range"].doc.lower()  # docs come from SB3's docstrings
    assert "n_steps" not in parameters("DQN")  # n-step returns would mix clients
    sac = parameters("SAC")
    assert sac["ent_coef"].type is ParamType.FLOAT and sac["ent_coef"].text and sac["ent_coef"].default == "auto"
    assert sac["action_noise"].type is ParamType.STR and sac["action_noise"].default is None
    assert "heatup_steps" in sac["learning_starts"].doc
    assert "action_noise" not in parameters("DQN") and "replay buffer columns" in parameters("TD3")["n_envs"].doc
    assert parameters("a2c")["n_steps"].default == 5 and parameters("DDPG")["tau"].default == 0.005


def test_values_are_converted_to_their_type():
    checked = check_parameters("ppo", {"normalize_advantage": "False", "n_steps": "32", "gamma": "0.9",
                                       "learning_rate": "lin_0.001", "batch_size": 64.0,
                                       "policy_kwargs": '{"net_arch": [8]}'})
    assert checked == {"normalize_advantage": False, "n_steps": 32, "gamma": 0.9, "learning_rate": "lin_0.001",
                       "batch_size": 64, "policy_kwargs": {"net_arch": [8]}}
    assert check_parameters("A2C", {"use_rms_prop": "false", "normalize_advantage": 1}) == {
        "use_rms_prop": False, "normalize_advantage": True}
    assert check_parameters("SAC", {"ent_coef": "auto_0.1", "target_entropy": "-2"}) == {
        "ent_coef": "auto_0.1", "target_entropy": -2.0}
    assert check_parameters("TD3", {"action_noise": "ornstein-uhlenbeck", "action_noise_sigma": "0.2"}) == {
        "action_noise": "ornstein-uhlenbeck", "action_noise_sigma": 0.2}


@pytest.mark.parametrize("algorithm, values, words", [
    ("PPO", {"nope": 1}, "PPO has no parameter 'nope'; known: "),
    ("PPO", {"n_steps": 3.5}, "'n_steps' must be an integer"),
    ("PPO", {"n_steps": True}, "'n_steps' must be an integer"),
    ("PPO", {"gamma": "high"}, "'gamma' must be a number"),
    ("PPO", {"normalize_advantage": "maybe"}, "'normalize_advantage' must be a boolean"),
    ("PPO", {"learning_rate": "lin_x"}, "lin_<start>"),
    ("PPO", {"gamma": None}, "'gamma' cannot be null"),
    ("PPO", {"use_sde": True}, "'use_sde' is not available in Shepherd: gSDE"),
    ("A2C", {"policy_kwargs": 3}, "'policy_kwargs' must be a JSON object"),
    ("DQN", {"n_steps": 3}, "'n_steps' is not available in Shepherd: n-step"),
    ("SAC", {"optimize_memory_usage": True}, "'optimize_memory_usage' is not available"),
    ("SAC", {"buffer_size": "big"}, "SAC parameter 'buffer_size' must be an integer"),
    ("TD3", {"action_noise": "pink"}, "'action_noise' must be one of normal, ornstein-uhlenbeck"),
    ("DDPG", {"policy_delay": 2}, "DDPG has no parameter 'policy_delay'"),
    ("DQN", {"action_noise": "normal"}, "DQN has no parameter 'action_noise'"),
])
def test_bad_values_name_the_parameter(algorithm, values, words):
    with pytest.raises(ParameterError, match=words.replace("(", r"\(")):
        check_parameters(algorithm, values)


def test_unknown_algorithm():
    with pytest.raises(ParameterError, match="unknown algorithm 'XYZ'; available: PPO, A2C, DQN, SAC, TD3, DDPG, "
                                             "QRDQN, TQC, CrossQ, TRPO, MaskablePPO, RecurrentPPO$"):
        parameters("XYZ")


def test_sb3_arguments_build_schedules_noise_and_activations():
    kwargs, n_envs = sb3_arguments("TD3", BOX1, {"learning_rate": "lin_0.01", "action_noise": "normal",
                                                 "action_noise_sigma": 0.3,
                                                 "policy_kwargs": {"net_arch": [8], "activation_fn": "tanh"}})
    assert n_envs == 1 and isinstance(kwargs["learning_rate"], LinearSchedule)
    assert kwargs["learning_rate"](0.5) == pytest.approx(0.005)
    assert isinstance(kwargs["action_noise"], NormalActionNoise) and kwargs["action_noise"]._sigma[0] == 0.3
    assert kwargs["policy_kwargs"]["activation_fn"].__name__ == "Tanh"
    assert "action_noise_sigma" not in kwargs
    kwargs, _ = sb3_arguments("DDPG", BOX1, {"action_noise": "ornstein-uhlenbeck"})
    assert isinstance(kwargs["action_noise"], OrnsteinUhlenbeckActionNoise)
    assert sb3_arguments("DDPG", BOX1, {})[0] == {"action_noise": None}
    assert sb3_arguments("PPO", BOX1, {"n_envs": 4}) == ({}, 4)
    with pytest.raises(ParameterError, match="activation_fn 'swish' unknown"):
        sb3_arguments("PPO", BOX1, {"policy_kwargs": {"activation_fn": "swish"}})


@pytest.mark.parametrize("action_space, able", [
    (2, ["PPO", "A2C", "DQN", "QRDQN", "TRPO", "MaskablePPO", "RecurrentPPO"]),
    ([[2], -1, 1], ["PPO", "A2C", "SAC", "TD3", "DDPG", "TQC", "CrossQ", "TRPO", "RecurrentPPO"]),
    (["MultiDiscrete", [3, 2]], ["PPO", "A2C", "TRPO", "MaskablePPO", "RecurrentPPO"]),
    (["MultiBinary", 3], ["PPO", "A2C", "TRPO", "MaskablePPO"]),
])
def test_spaces_an_algorithm_cannot_handle_are_refused_naming_those_that_can(action_space, able):
    space = parse_space(action_space)
    obs = parse_space([[3], "-inf", "inf"])
    for algorithm in [a.name for a in ALGORITHMS.values()]:
        if algorithm in able:
            check_spaces(algorithm, obs, space)
        else:
            with pytest.raises(ParameterError, match=f"algorithms that can: {', '.join(able)}$"):
                check_spaces(algorithm, obs, space)


def test_dict_observations_are_refused_by_an_algorithm_without_a_policy_for_them():
    obs = parse_space({"position": [[2], -1, 1]})
    with pytest.raises(ParameterError, match="CrossQ has no policy for Dict observations; algorithms that have one "
                                             "for Box actions: PPO, A2C, SAC, TD3, DDPG, TQC, TRPO, "
                                             "RecurrentPPO$"):
        check_spaces("CrossQ", obs, BOX1)


def test_unbounded_box_actions_are_refused():
    with pytest.raises(ParameterError, match="finite low and high"):
        check_spaces("SAC", BOX1, parse_space([[2], "-inf", "inf"]))


def test_registry_records_carry_the_continuous_flag():
    algorithms, params = registry_records()
    assert {a["name"]: a["continuous"] for a in algorithms} == {
        "PPO": True, "A2C": True, "DQN": False, "SAC": True, "TD3": True, "DDPG": True, "QRDQN": False,
        "TQC": True, "CrossQ": True, "TRPO": True, "MaskablePPO": False, "RecurrentPPO": True}
    assert {a["name"] for a in algorithms if a["on_policy"]} == {"PPO", "A2C", "TRPO", "MaskablePPO", "RecurrentPPO"}
    assert [a["name"] for a in algorithms if a["action_mask"]] == ["DQN", "QRDQN", "MaskablePPO"]
    assert all(p["type"] in (1, 2, 3, 4, 5) for p in params)
    assert {p["algorithm"] for p in params} == {a.name for a in ALGORITHMS.values()}
    assert np.all([isinstance(p["doc"], str) for p in params])


@pytest.mark.parametrize("algorithm, obs, act, values, sharing, words", [
    ("PPO", [[4], -1, 1], 2, {"learning_rate": "nan"}, "pooled", "'learning_rate' must be a finite number"),
    ("PPO", [[4], -1, 1], 2, ["gamma", 0.9], "pooled", "parameters must be an object"),
    ("SAC", [[4], -1, 1], 2, {}, "pooled", "SAC cannot handle Discrete actions"),
    ("XYZ", [[4], -1, 1], 2, {}, "pooled", "unknown algorithm 'XYZ'"),
])
def test_an_agent_definition_is_checked_whole_in_one_place(algorithm, obs, act, values, sharing, words):
    with pytest.raises(ParameterError, match=words):
        check_agent(AgentDefinition("a", algorithm, obs, act, values, sharing))


def test_an_unknown_sharing_mode_is_refused_with_the_modes_there_are():
    with pytest.raises(ValueError, match="knowledge sharing 'federated' is not available; use one of pooled"):
        AgentDefinition("a", "PPO", [[4], -1, 1], 2, {}, "federated")


def test_a_preset_and_the_admin_service_refuse_the_same_definitions():
    from shepherd.admin.errors import Invalid
    from shepherd.admin.operations import _checked
    from shepherd.admin.records import NewAgent
    from shepherd.agents.bounds import DEFAULT_BOUNDS
    from shepherd.graph import AgentSpec, GraphManager, PresetError

    bad = {"learning_rate": float("inf")}
    message = r"agents\[0\]\.parameters\.learning_rate: PPO parameter 'learning_rate' must be a finite number"
    with pytest.raises(PresetError, match=message):
        GraphManager([AgentSpec("a", "ppo", [[4], -1, 1], 2, bad)]).check()
    with pytest.raises(Invalid, match="PPO parameter 'learning_rate' must be a finite number"):
        _checked(NewAgent("alice", AgentDefinition("a", "ppo", [[4], -1, 1], 2, bad)).definition, DEFAULT_BOUNDS)
    assert _checked(AgentDefinition("a", "ppo", [[4], -1, 1], 2, {"gamma": "0.9"}), DEFAULT_BOUNDS) == ("PPO", {"gamma": 0.9})
