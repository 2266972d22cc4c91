"""RL Zoo hyperparameter files as presets (``zoo:ALGO/ENV_ID``, ``zoo:FILE.yml#ENV_ID``): what is mapped,
what is refused by name, and the overrides; loading and checking only (no server, no data folder).

tests/presets/zoo/ holds real entries copied from RL Zoo's files, so these tests need no rl_zoo3 package;
the ones that read the installed package's own files skip without it."""

from __future__ import annotations

import re

import pytest

from shepherd.cli import main
from shepherd.graph import PresetError
from shepherd.loading import load_preset
from shepherd.graph.preset import InvalidPreset
from shepherd.loading.zoo import map_entry, read_entry, zoo_folder, zoo_source
from shepherd.loading.zoo_literal import ExpressionError, literal
from tests.conftest import TEST_PRESETS

ZOO = TEST_PRESETS / "zoo"
needs_rl_zoo3 = pytest.mark.skipif(zoo_folder() is None, reason="rl_zoo3 is not installed")


def zoo(algorithm: str, env_id: str) -> str:
    return f"zoo:{ZOO / algorithm}.yml#{env_id}"


def problems_of(name: str, *overrides: str) -> list[str]:
    with pytest.raises(InvalidPreset) as raised:
        load_preset(name, overrides=overrides)
    return [str(problem) for problem in raised.value.problems]


def mapped(algorithm: str, env_id: str, **changes: object) -> tuple[dict, list[str]]:
    source = zoo_source(zoo(algorithm, env_id))
    entry, default = read_entry(source)
    entry.update(changes)
    data, problems = map_entry(entry, source, default)
    return data, [str(problem) for problem in problems]


def test_ppo_cartpole_is_the_cartpole_ppo_preset_s_agent_and_schedule():
    graph = load_preset(zoo("ppo", "CartPole-v1"))
    python = load_preset("cartpole_ppo")
    agent, theirs = graph.agents[0], python.agents[0]
    assert (agent.name, agent.algorithm, agent.action_space) == ("ppo-CartPole-v1", "PPO", 2)
    assert agent.parameters == theirs.parameters  # RL Zoo's settings, which cartpole_ppo.py copies
    assert agent.observation_space[0] == [4]  # CartPole-v1's own Box, from gymnasium.make
    assert graph.schedule.improve_steps == 100_000 == python.schedule.improve_steps  # n_timesteps
    assert graph.schedule.steps_between_evaluation_periods == 5_000
    validation = graph.validation
    assert (validation.env_id, validation.target_return, validation.max_steps, validation.clients) == (
        "CartPole-v1", 475.0, 100_000, 4)  # the spec's reward_threshold; min(n_envs, 4) clients


def test_dqn_maps_learning_starts_to_heatup_and_reads_policy_kwargs():
    graph = load_preset(zoo("dqn", "CartPole-v1"))
    parameters = graph.agents[0].parameters
    assert graph.schedule.heatup_steps == 1000 and "learning_starts" not in parameters
    assert parameters["policy_kwargs"] == {"net_arch": [256, 256]}
    assert parameters["exploration_fraction"] == 0.16 and graph.schedule.improve_steps == 50_000


def test_td3_noise_becomes_shepherd_s_action_noise():
    graph = load_preset(zoo("td3", "MountainCarContinuous-v0"))
    parameters = graph.agents[0].parameters
    assert (parameters["action_noise"], parameters["action_noise_sigma"]) == ("ornstein-uhlenbeck", 0.5)
    assert "noise_type" not in parameters and graph.validation.target_return == 90.0
    assert graph.schedule.heatup_steps == 100  # SB3's learning_starts when the entry has none


def test_every_key_that_cannot_apply_is_one_line_naming_it():
    _, problems = mapped("ppo", "Acrobot-v1")
    keys = [line.split(":")[0] for line in problems]
    assert keys == ["zoo.env_wrapper", "zoo.vec_env_wrapper", "zoo.callback", "zoo.policy"]
    assert "CnnPolicy" in problems[3] and "not images" in problems[3]
    assert all("-cp zoo." in line and "=null" in line for line in problems)


def test_normalize_and_frame_stack_become_the_agent_s_filters():
    data, _ = mapped("ppo", "Acrobot-v1")
    assert data["agents"][0]["filters"] == {"normalize_observations": False, "normalize_rewards": True,
                                            "frame_stack": 2}
    data, _ = mapped("ppo", "MountainCarContinuous-v0")
    assert data["agents"][0]["filters"] == {"normalize_observations": True, "normalize_rewards": True,
                                            "gamma": 0.9999}  # RL Zoo scales rewards with the algorithm's gamma
    data, _ = mapped("ppo", "CartPole-v1")
    assert "filters" not in data["agents"][0]
    _, problems = mapped("ppo", "CartPole-v1", normalize="dict(norm_obs_keys=['a'])")
    assert problems == ["zoo.normalize.norm_obs_keys: VecNormalize's argument has no filter field here; the "
                        "filters take norm_obs, norm_reward, clip_obs, clip_reward, gamma, epsilon"]


def test_policy_kwargs_are_read_as_data_never_evaluated():
    assert literal("dict(log_std_init=-2, ortho_init=False, activation_fn=nn.ReLU, "
                   "net_arch=dict(pi=[256], vf=[256]))") == {
        "log_std_init": -2, "ortho_init": False, "activation_fn": "relu", "net_arch": {"pi": [256], "vf": [256]}}
    assert literal("{'norm_obs': True, 'norm_reward': False}") == {"norm_obs": True, "norm_reward": False}
    assert literal("dict(activation_fn=th.nn.Tanh)") == {"activation_fn": "tanh"}
    for text, message in (("__import__('os').system('true')", "is not plain data"),
                          ("dict(optimizer_class=th.optim.Adam)", "th.optim.Adam is not one of the activations"),
                          ("dict(**x)", "** in dict"), ("dict(a=", "not a Python expression")):
        with pytest.raises(ExpressionError, match=re.escape(message)):
            literal(text)
    data, _ = mapped("ppo", "Acrobot-v1")  # RL Zoo's old net_arch=[dict(pi=..., vf=...)] is SB3's dict now
    assert data["agents"][0]["parameters"]["policy_kwargs"] == {
        "log_std_init": -2, "ortho_init": False, "activation_fn": "gelu", "net_arch": {"pi": [256], "vf": [256]}}
    _, problems = mapped("ppo", "CartPole-v1", policy_kwargs="dict(features_extractor_class=MyNet)")
    assert problems == ["zoo.policy_kwargs: MyNet is not one of the activations Shepherd takes (nn.Tanh, nn.ReLU, "
                        "nn.ELU, nn.LeakyReLU, nn.GELU); drop it with -cp zoo.policy_kwargs=null"]


def test_gsde_is_refused_and_cp_zoo_drops_it():
    problems = problems_of(zoo("ppo", "Pendulum-v1"))
    assert len(problems) == 1 and problems[0].startswith(f"{ZOO / 'ppo.yml'}#Pendulum-v1: zoo.use_sde: gSDE is "
                                                         "not available in Shepherd")
    graph = load_preset(zoo("ppo", "Pendulum-v1"), overrides=["zoo.use_sde=null"])
    assert "use_sde" not in graph.agents[0].parameters and "sde_sample_freq" not in graph.agents[0].parameters
    assert graph.validation.target_return == -200.0  # Shepherd's table: Pendulum-v1's spec has no threshold


def test_overrides_change_the_entry_or_the_preset_and_unknown_keys_are_one_line():
    graph = load_preset(zoo("ppo", "CartPole-v1"), overrides=[
        "zoo.n_timesteps=2e4", "agents.ppo-CartPole-v1.parameters.gamma=0.95", "validation.target_return=400"])
    assert graph.schedule.improve_steps == 20_000 and graph.validation.max_steps == 20_000
    assert graph.agents[0].parameters["gamma"] == 0.95 and graph.validation.target_return == 400
    problems = problems_of(zoo("ppo", "CartPole-v1"), "agents.ppo-CartPole-v1.parameters.gamme=0.9")
    assert len(problems) == 1 and problems[0].startswith(
        "-cp agents.ppo-CartPole-v1.parameters.gamme=0.9: unknown key 'gamme' in agents.ppo-CartPole-v1.parameters: "
        "PPO has no such parameter; known: ")
    problems = problems_of(zoo("ppo", "CartPole-v1"), "zoo.n_stepz=64")
    assert problems == [f"{ZOO / 'ppo.yml'}#CartPole-v1: agents[0].parameters.n_stepz: PPO has no parameter "
                        "'n_stepz'; known: " + problems[0].split("known: ")[1]]


def test_a_typo_in_the_entry_is_the_registry_s_line():
    problems = problems_of(zoo("ppo", "CartPole-v1"), "zoo.gamma=high")
    assert problems == [f"{ZOO / 'ppo.yml'}#CartPole-v1: agents[0].parameters.gamma: PPO parameter 'gamma' must be "
                        "a number, got 'high'"]


@pytest.mark.parametrize("name, message", [
    ("zoo:ppo", "zoo:ppo: write zoo:ALGO/ENV_ID (rl_zoo3's hyperparams/ALGO.yml) or zoo:FILE.yml#ENV_ID"),
    (f"zoo:{ZOO}/nope.yml#CartPole-v1", f"zoo:{ZOO}/nope.yml#CartPole-v1: no file {ZOO}/nope.yml"),
    (f"zoo:{ZOO}/dqn.yml#Pendulum-v1", f"{ZOO}/dqn.yml#Pendulum-v1: no entry for Pendulum-v1 and no default "
                                       "entry; the file has CartPole-v1"),
])
def test_a_zoo_source_that_cannot_be_read_is_one_line(name, message):
    with pytest.raises(PresetError) as raised:
        load_preset(name)
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)


def test_an_env_without_an_entry_takes_the_default_one_which_gymnasium_must_make(tmp_path):
    path = tmp_path / "a2c.yml"
    path.write_text("default:\n  n_timesteps: !!float 1e6\n  policy: 'MlpPolicy'\n")
    graph = load_preset(f"zoo:{path}#Acrobot-v1")
    assert graph.agents[0].algorithm == "A2C" and "default entry" in graph.description
    assert graph.validation.target_return == -100.0  # Acrobot-v1's reward_threshold
    with pytest.raises(PresetError, match=f"^{re.escape(str(path))}#NoSuchEnv-v0: gymnasium cannot make NoSuchEnv-v0"):
        load_preset(f"zoo:{path}#NoSuchEnv-v0")


def test_check_accepts_a_zoo_preset_and_lists_its_problems(capsys):
    assert main(["check", zoo("ppo", "CartPole-v1")]) == 0
    out = capsys.readouterr().out
    assert "(zoo, " in out and "agent ppo-CartPole-v1: PPO" in out and "target return 475" in out
    assert main(["check", zoo("ppo", "Acrobot-v1")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].endswith("problems") and sum("zoo." in line for line in err) == 4


@needs_rl_zoo3
def test_the_installed_rl_zoo3_files_are_read_by_algorithm_and_env():
    graph = load_preset("zoo:ppo/CartPole-v1")
    assert graph.agents[0].parameters == load_preset(zoo("ppo", "CartPole-v1")).agents[0].parameters
    assert zoo_source("zoo:ppo/CartPole-v1").shown == "rl_zoo3 hyperparams/ppo.yml#CartPole-v1"
    graph = load_preset("zoo:ppo/Pendulum-v1", overrides=["zoo.use_sde=null"])
    assert graph.agents[0].parameters["n_steps"] == 1024 and graph.validation.target_return == -200.0
    with pytest.raises(PresetError, match="rl_zoo3 has no hyperparams/nope.yml; it has a2c, "):
        load_preset("zoo:nope/CartPole-v1")


def test_a_normalized_entry_builds_an_agent_with_filters_that_cp_can_turn_off():
    name = zoo("ppo", "MountainCarContinuous-v0")
    filters = load_preset(name, overrides=["zoo.use_sde=null"]).agents[0].filters
    assert (filters.normalize_observations, filters.normalize_rewards, filters.gamma) == (True, True, 0.9999)
    filters = load_preset(name, overrides=[
        "zoo.use_sde=null", "agents.ppo-MountainCarContinuous-v0.filters.normalize_observations=false"]).agents[0].filters
    assert (filters.normalize_observations, filters.normalize_rewards) == (False, True)
    assert not load_preset(name, overrides=["zoo.use_sde=null", "zoo.normalize=null"]).agents[0].filters.active


def test_an_image_env_is_served_with_an_image_space_and_its_cnn_policy_accepted(tmp_path):
    import shepherd.envs  # noqa: F401  (registers shepherd/PixelDot-v0, uint8 36x36x1 observations)

    path = tmp_path / "ppo.yml"
    path.write_text("default:\n  n_timesteps: !!float 1e4\n  policy: 'CnnPolicy'\n  frame_stack: 2\n")
    agent = load_preset(f"zoo:{path}#shepherd/PixelDot-v0").agents[0]
    assert agent.observation_space == ["Image", [36, 36, 1]] and agent.filters.frame_stack == 2
