"""``python run.py algorithms [NAME]``: the registry as a user reads it."""

import json

from shepherd.cli import main


def test_lists_every_algorithm_with_its_action_spaces(capsys):
    assert main(["algorithms"]) == 0
    out = capsys.readouterr().out
    for name in ("PPO", "A2C", "DQN", "SAC", "TD3", "DDPG", "QRDQN", "TQC", "CrossQ", "TRPO", "RecurrentPPO"):
        assert f"\n{name} " in "\n" + out
    assert "DQN           off-policy  no          yes    stable-baselines3  Discrete\n" in out
    assert "CrossQ        off-policy  yes         no     sb3-contrib        Box\n" in out
    assert "MaskablePPO   on-policy   no          yes    sb3-contrib        Discrete, MultiDiscrete, MultiBinary\n" in out
    assert "not served: ARS: ARS learns" in out


def test_lists_one_algorithms_parameters_with_types_and_defaults(capsys):
    assert main(["algorithms", "td3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("TD3 (off-policy; actions: Box)")
    assert "policy_delay" in out and "1 int   default 2" in out
    assert "action_noise" in out and "one of normal, ornstein-uhlenbeck" in out
    assert "learning_rate" in out and "or lin_<start>" in out
    assert "not available in Shepherd: n_steps" in out


def test_json_output(capsys):
    assert main(["algorithms", "SAC", "--json"]) == 0
    params = {p["name"]: p for p in json.loads(capsys.readouterr().out)}
    assert params["gamma"]["type"] == 2 and params["gamma"]["default"] == 0.99
    assert params["ent_coef"]["text"] is True


def test_an_unknown_algorithm_is_one_line_and_exit_status_2(capsys):
    assert main(["algorithms", "XYZ"]) == 2
    err = capsys.readouterr().err
    assert err == ("error: unknown algorithm 'XYZ'; available: PPO, A2C, DQN, SAC, TD3, DDPG, QRDQN, TQC, CrossQ, TRPO, "
                   "MaskablePPO, RecurrentPPO\n")
