"""Presets in YAML, -cp overrides, --seed, `run.py check` and `run.py -l`: loading and checking only (no
server, no data folder)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from shepherd.cli import main
from shepherd.graph import GraphManager, Preset, PresetError
from shepherd.loading import load_preset
from shepherd.graph.preset import InvalidPreset
from shepherd.loading import yaml_preset
from shepherd.loading.yaml_preset import AGENT_KEYS, preset_data
from shepherd.loading.presets import preset_entries, preset_path
from tests.conftest import TEST_PRESETS

AGENT = """
  - name: pole
    algorithm: PPO
    observation_space: [[4], -inf, inf]
    action_space: 2
    parameters: {n_steps: 32, gamma: 0.9}
"""


def write(folder: Path, text: str, name: str = "x.yaml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def problems_of(path: str | Path, *overrides: str, seed: int | None = None) -> list[str]:
    with pytest.raises(InvalidPreset) as raised:
        load_preset(str(path), overrides=overrides, seed=seed)
    assert str(raised.value) == "\n".join(map(str, raised.value.problems))
    return [str(problem) for problem in raised.value.problems]


def test_the_yaml_cartpole_preset_is_the_python_one():
    python, yaml = load_preset("cartpole_ppo"), load_preset("cartpole_ppo_yaml")
    assert isinstance(yaml, Preset) and yaml.name == "cartpole_ppo_yaml"
    assert yaml.agents == python.agents  # names, algorithms, spaces, parameters, sharing
    assert yaml.schedule == python.schedule
    assert yaml.validation == python.validation
    assert yaml.owner == python.owner == "demo"
    assert {**preset_data(yaml), "description": ""} == {**preset_data(python), "description": ""}
    assert yaml.description.startswith("PPO on CartPole-v1")


def test_a_typo_in_a_yaml_preset_is_one_line_naming_the_key_path(tmp_path):
    path = write(tmp_path, f"owner: me\nagents:{AGENT.replace('parameters:', 'paramters:')}")
    with pytest.raises(PresetError) as raised:
        load_preset(str(path))
    assert str(raised.value) == (f"{path}: agents[0].paramters: unknown key; expected one of "
                                 f"{', '.join(AGENT_KEYS)}")


def test_every_problem_of_a_yaml_preset_is_listed_with_its_key_path(tmp_path):
    path = write(tmp_path, f"""
agents:{AGENT.replace('gamma: 0.9', 'gama: 0.9, n_epochs: many')}
  - name: pole
    algorithm: PPPO
    observation_space: [[4], -inf, inf]
    action_space: 2
  - {{name: third, action_space: 2}}
schedule: {{heatup_steps: -1, evaluation_episodes: five, improve_step: 3}}
validation: {{env_id: CartPole-v1, target_return: 475, clients: 0, env_kwargs: [1]}}
colour: blue
""")
    found = [line.removeprefix(f"{path}: ") for line in problems_of(path)]
    assert found[0] == ("colour: unknown key; expected one of owner, description, agents, schedule, validation, "
                        "environments")
    expected = [
        "agents[2].algorithm: missing; a value is required",
        "agents[2].observation_space: missing; a value is required",
        "schedule.improve_step: unknown key;",
        "schedule.heatup_steps: must not be negative",
        "schedule.evaluation_episodes: must be an integer, got 'five'",
        "validation.max_steps: missing; a value is required",
        "validation.clients: must be positive",
        "validation.env_kwargs: must be a mapping",
        "agents[0].parameters.gama: PPO has no parameter 'gama'; known: ",
        "agents[0].parameters.n_epochs: PPO parameter 'n_epochs' must be an integer, got 'many'",
        "agents[1].name: agent names in a preset must be unique; agents[0] is also named 'pole'",
        "agents[1]: unknown algorithm 'PPPO'",
    ]
    assert len(found) == len(expected) + 1
    for prefix in expected:
        assert any(line.startswith(prefix) for line in found), (prefix, found)


@pytest.mark.parametrize("text, problem", [
    ("- just a list", "a preset is a mapping with the keys owner, description, agents, schedule, validation"),
    ("owner: me", "agents: a preset needs a list of at least one agent"),
    ("agents: []", "agents: a preset needs a list of at least one agent"),
    ("agents: [1]", "agents[0]: must be a mapping of name: value, not 1"),
    (f"agents:{AGENT}schedule: {{heatup_steps: 10}}", "schedule.heatup_steps: heatup_steps is for off-policy"),
    (f"agents:{AGENT}validation: {{env_id: C, target_return: 1, max_steps: 9, agent: nobody}}",
     "validation.agent: names agent 'nobody', which the preset lacks"),
    (f"agents:{AGENT}  - {{name: x, algorithm: PPO, observation_space: 2, action_space: 2, sharing: federated}}",
     "agents[1].sharing: knowledge sharing 'federated' is not available"),
])
def test_malformed_yaml_presets_are_refused_with_the_key_path(tmp_path, text, problem):
    (found,) = problems_of(write(tmp_path, text))
    assert found.startswith(f"{tmp_path / 'x.yaml'}: {problem}"), found


def test_a_file_that_is_not_yaml_is_one_line_with_the_line_number(tmp_path):
    path = write(tmp_path, "agents: [\n  {name: a\n")
    with pytest.raises(PresetError, match=rf"^{path}: not valid YAML \(line \d+, column \d+\)") as raised:
        load_preset(str(path))
    assert "\n" not in str(raised.value)


def test_a_python_preset_lists_every_problem_too():
    from shepherd.graph import AgentSpec, Schedule

    graph = GraphManager([AgentSpec("a", "PPO", [[4], -1, 1], 2, {"gama": 1, "n_steps": "x"}),
                          AgentSpec("a", "DQN", [[4], -1, 1], 2, {"learning_starts": 5})], Schedule(heatup_steps=3))
    assert [str(problem).split(":")[0] for problem in graph.problems()] == [
        "agents[0].parameters.gama", "agents[0].parameters.n_steps", "schedule.heatup_steps", "agents[1].name",
        "agents[1].parameters.learning_starts"]
    with pytest.raises(InvalidPreset) as raised:
        graph.check()
    assert len(str(raised.value).splitlines()) == 5


def test_preset_names_keep_the_admin_api_s_name_rule_with_the_key_path(tmp_path):
    """A name the admin API refuses (it names folders, routes and download file names) is refused from a
    YAML preset, a Python preset and a -cp alike, with the key path and the -cp that set it."""
    from shepherd.graph import AgentSpec

    bad = 'x"\r\nSet-Cookie: a=b'
    path = write(tmp_path, "owner: 'the owner'\nagents:" + AGENT.replace("name: pole", f"name: {json.dumps(bad)}"))
    assert [line.split("x.yaml: ")[1] for line in problems_of(path)] == [
        "owner: a user name is 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit; "
        "got 'the owner'",
        "agents[0].name: an agent name is 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or "
        f"digit; got {bad!r}"]
    (found,) = problems_of("cartpole_ppo_yaml", "agents.cartpole.name=a/b")
    assert found.startswith("-cp agents.cartpole.name=a/b: agents[0].name: an agent name is 1 to 64"), found
    (found,) = problems_of("cartpole_ppo", "owner=" + "o" * 65)
    assert found.startswith("-cp owner=" + "o" * 65 + ": owner: a user name is 1 to 64"), found
    python = Preset((AgentSpec("../pole", "PPO", [[4], -1, 1], 2, {}),), owner="demo")
    assert [str(problem).split(":")[0] for problem in python.problems()] == ["agents[0].name"]


def test_overrides_are_typed_as_the_preset_s_own_values():
    graph = load_preset("cartpole_ppo_yaml", overrides=[
        "agents.cartpole.parameters.learning_rate=0.0003", "agents.cartpole.parameters.normalize_advantage=true",
        "agents.cartpole.parameters.clip_range=lin_0.1", "agents.cartpole.parameters.policy_kwargs={net_arch: [8]}",
        "agents.cartpole.parameters.policy_kwargs.net_arch=[64, 64]", "schedule.evaluation_episodes=10",
        "schedule.improve_steps=null", "validation.clients=2", "validation.env_kwargs.max_episode_steps=200",
        "owner=someone"])
    parameters = graph.agents[0].parameters
    assert parameters["learning_rate"] == 0.0003 and parameters["normalize_advantage"] is True
    assert parameters["clip_range"] == "lin_0.1" and parameters["policy_kwargs"] == {"net_arch": [64, 64]}
    assert parameters["n_steps"] == 32  # the rest as the file has it
    assert graph.schedule.evaluation_episodes == 10 and graph.schedule.improve_steps is None
    assert graph.validation.clients == 2 and graph.validation.env_kwargs == {"max_episode_steps": 200}
    assert graph.owner == "someone" and graph.name == "cartpole_ppo_yaml"
    # a Python preset takes the same overrides; the numbers of the schedule are converted ("10" is 10)
    python = load_preset("cartpole_ppo", overrides=["schedule.evaluation_episodes='10'",
                                                    "agents.cartpole.parameters.gamma=0.5"])
    assert python.schedule.evaluation_episodes == 10 and python.agents[0].parameters["gamma"] == 0.5
    assert load_preset("cartpole_ppo").agents[0].parameters["gamma"] == 0.98  # nothing else changed


@pytest.mark.parametrize("override, problem", [
    ("agents.cartpole.paramters.gamma=1", "unknown key 'paramters' in agents.cartpole; known: "
                                          + ", ".join(AGENT_KEYS)),
    ("agents.cartpol.parameters.gamma=1", "no agent named 'cartpol' in agents; known: cartpole"),
    ("agents.cartpole.parameters.gama=1", "unknown key 'gama' in agents.cartpole.parameters: PPO has no such "
                                          "parameter; known: advice_decay, advice_keep, advice_strength, batch_size,"),
    ("schedule.evaluation_episode=1", "unknown key 'evaluation_episode' in schedule; known: heatup_steps,"),
    ("validation.client=1", "unknown key 'client' in validation; known: env_id, target_return,"),
    ("sched.x=1", "unknown key 'sched'; known: owner, description, agents, schedule, validation"),
    ("schedule.heatup_steps.x=1", "schedule.heatup_steps is a value, not a mapping"),
    ("schedule.evaluation_episodes=ten", "schedule.evaluation_episodes: must be an integer, got 'ten'"),
    ("schedule.improve_steps=-5", "schedule.improve_steps: must be positive or None"),
    ("agents.cartpole.parameters.n_steps=[64, 64]", "agents[0].parameters.n_steps: PPO parameter 'n_steps' must be "
                                                    "an integer, got [64, 64]"),
    ("agents.cartpole.parameters.use_sde=true", "agents[0].parameters.use_sde: PPO parameter 'use_sde' is not "
                                                "available in Shepherd"),
    ("agents.cartpole.algorithm=SAC", "agents[0]: SAC cannot handle Discrete actions"),
    ("validation.clients=0", "validation.clients: must be positive"),
    ("gamma", "write KEY=VALUE"),
    ("schedule.heatup_steps=[", "the value '[' is not a YAML value"),
    # a number that is not finite in a whole-number field (YAML reads 1e400 as a string: float() makes it inf)
    # was an OverflowError's or a ValueError's traceback, from the preset, -cp, the zoo and the agents commands
    ("agents.cartpole.parameters.n_steps=1e400", "agents[0].parameters.n_steps: PPO parameter 'n_steps' must be "
                                                 "a finite number"),
    ("agents.cartpole.parameters.n_steps=.nan", "agents[0].parameters.n_steps: PPO parameter 'n_steps' must be "
                                                "a finite number"),
    # periods -s refuses: 0 or less checkpointed at every step, NaN never by time
    ("schedule.checkpoint_every_seconds=0", "schedule.checkpoint_every_seconds: must be a positive number"),
    ("schedule.checkpoint_every_seconds=-5", "schedule.checkpoint_every_seconds: must be a positive number"),
    ("schedule.checkpoint_every_seconds=.nan", "schedule.checkpoint_every_seconds: must be a finite number"),
    ("schedule.checkpoint_every_steps=0", "schedule.checkpoint_every_steps: must be at least 1"),
])
def test_a_bad_override_is_one_line_naming_it_and_changes_nothing(override, problem):
    (found,) = problems_of("cartpole_ppo_yaml", override)
    assert found.startswith(f"-cp {override}: {problem}"), found
    assert load_preset("cartpole_ppo_yaml").agents == load_preset("cartpole_ppo").agents


def test_every_bad_override_is_listed():
    found = problems_of("cartpole_ppo", "agents.cartpole.parameters.gama=1", "schedule.heatup_steps=x",
                        "validation.clients=2", "nothing")
    assert [line.split(": ")[0] for line in found] == ["-cp nothing", "-cp agents.cartpole.parameters.gama=1",
                                                      "-cp schedule.heatup_steps=x"]


def test_seed_sets_every_agent_s_seed_unless_a_cp_sets_it(tmp_path):
    path = write(tmp_path, f"agents:{AGENT}{AGENT.replace('pole', 'other')}")
    assert [spec.parameters["seed"] for spec in load_preset(str(path), seed=7).agents] == [7, 7]
    graph = load_preset(str(path), overrides=["agents.other.parameters.seed=3"], seed=7)
    assert [spec.parameters["seed"] for spec in graph.agents] == [7, 3]
    assert "seed" not in load_preset(str(path)).agents[0].parameters


def test_seed_leaves_a_programmed_selector_alone(capsys):
    """A programmed selector has no algorithm, so no parameters: --seed refused the bundled corridor_levels."""
    assert main(["check", "corridor_levels", "--seed", "3"]) == 0, capsys.readouterr().err
    seeds = {spec.name: spec.parameters.get("seed") for spec in load_preset("corridor_levels", seed=3).agents}
    assert seeds.pop("guide") is None and set(seeds.values()) == {3}


def test_the_validated_agent_refused_for_its_own_fault_is_not_also_missing(tmp_path):
    """A broken selector of the agent the validation block names was reported twice, the second time as "names
    agent 'guide', which the preset lacks"."""
    text = (Path(__file__).parents[2] / "presets" / "corridor_levels.yaml").read_text()
    broken = tmp_path / "broken.yaml"
    broken.write_text(text.replace("shepherd.envs.corridor:toward_cue", "shepherd.envs.corridor:no_such_fn"))
    problems = problems_of(broken)
    assert len(problems) == 1 and "no function 'no_such_fn'" in problems[0], problems
    assert "lacks" in " ".join(problems_of(broken, "validation.agent=nobody"))  # one it really lacks still is


def test_a_preset_that_is_not_utf8_or_a_python_preset_that_does_not_parse_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"agents:\n  - {name: pole, algorithm: PPO\xff}\n")
    assert main(["check", str(bad)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "bad.yaml: not UTF-8 text" in line
    write(tmp_path, '"""doc"""\ndef f(:\n', "broken.py")  # the names listed when a name is not found read it
    entries = {entry.name: entry.description for entry in preset_entries(tmp_path)}
    assert entries["broken"].startswith("(not readable: SyntaxError") and entries["bad"].startswith("(not readable")
    with pytest.raises(PresetError, match="no preset named 'typo'; available: bad, broken"):
        preset_path("typo", tmp_path)


def test_a_name_is_found_as_python_or_yaml_and_two_files_of_one_name_are_refused(tmp_path):
    write(tmp_path, f"agents:{AGENT}", "one.yml")
    write(tmp_path, '"""doc"""\n', "two.py")
    write(tmp_path, f"agents:{AGENT}", "two.yaml")
    assert preset_path("one", tmp_path) == tmp_path / "one.yml"
    assert load_preset("one", tmp_path).name == "one"
    with pytest.raises(PresetError, match="two presets are named 'two' \\(two.py, two.yaml\\)"):
        preset_path("two", tmp_path)
    with pytest.raises(PresetError, match="no preset named 'three'; available: one, two"):
        preset_path("three", tmp_path)
    assert [(entry.name, entry.kind) for entry in preset_entries(tmp_path)] == [
        ("one", "yaml"), ("two", "python"), ("two", "yaml")]


def test_list_shows_yaml_presets_and_says_which_is_which(capsys):
    assert main(["-l"]) == 0
    rows = {tuple(line.split()[:2]) for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert ("cartpole_ppo_yaml", "yaml") in rows and ("cartpole_ppo", "python") in rows


def test_check_prints_a_summary_and_exits_0(capsys):
    assert main(["check", "cartpole_ppo_yaml", "-cp", "schedule.evaluation_episodes=7", "--seed", "4"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("preset cartpole_ppo_yaml (yaml, ")
    assert "agent cartpole: PPO, observations [[4], \"-inf\", \"inf\"], actions 2, sharing pooled" in out
    assert '"lin_0.001"' in out and "seed=4" in out and "evaluate 7 episodes every 5,000 steps" in out
    assert "validation: CartPole-v1, 4 client(s) driving agent cartpole, target return 475" in out


def test_check_lists_every_problem_and_exits_2(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be written: no data folder appears
    path = write(tmp_path, f"agents:{AGENT.replace('gamma', 'gama')}schedule: {{evaluation_episodes: -2}}\n"
                           "validation: {env_id: CartPole-v1, target_return: 1, max_steps: 10}\n")
    assert main(["check", str(path), "-cp", "validation.clients=x", "-cp", "agents.pole.parameters.n_steps=y"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "preset x.yaml: 4 problems"
    assert err[1] == "  x.yaml: schedule.evaluation_episodes: must not be negative"
    assert err[2] == "  -cp validation.clients=x: validation.clients: must be an integer, got 'x'"
    assert err[3] == ("  -cp agents.pole.parameters.n_steps=y: agents[0].parameters.n_steps: PPO parameter 'n_steps' "
                      "must be an integer, got 'y'")
    assert err[4].startswith("  x.yaml: agents[0].parameters.gama: PPO has no parameter 'gama'")
    assert list(tmp_path.iterdir()) == [path]


def test_check_reports_what_stable_baselines3_refuses(capsys):
    # the types allow any integer for batch_size; PPO itself refuses 1 when the model is built
    assert main(["check", str(TEST_PRESETS / "tiny_ppo.py"), "-cp", "agents.tiny.parameters.batch_size=1"]) == 2
    assert "agents[0]: PPO rejected its parameters" in capsys.readouterr().err


def test_deeply_nested_yaml_and_cp_values_are_one_line_not_a_traceback(tmp_path, capsys):
    """PyYAML recurses once per level: thousands of brackets exhausted Python's stack (RecursionError)."""
    deep = "[" * 5000 + "]" * 5000
    path = write(tmp_path, "agents:" + AGENT.replace("gamma: 0.9}", f"gamma: 0.9, policy_kwargs: {deep}}}"))
    with pytest.raises(PresetError, match=r"x.yaml: values nest deeper than 32 levels"):
        load_preset(str(path))
    (found,) = problems_of("cartpole_ppo", f"agents.cartpole.parameters.policy_kwargs={deep}")
    assert found.startswith("-cp agents.cartpole.parameters.policy_kwargs=[[[") and "nest deeper than 32" in found
    (found,) = problems_of("cartpole_ppo", "agents.cartpole.parameters.policy_kwargs=" + "{a: " * 40 + "1" + "}" * 40)
    assert "nest deeper than 32 levels" in found  # parsed, but deeper than any preset needs
    assert main(["check", str(path)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_thousands_of_brackets_are_refused_before_pyyaml_reads_them(monkeypatch):
    """PyYAML takes seconds over thousands of brackets before its depth is known: the text's bracket depth is
    checked first. Brackets in quoted strings and comments are not nesting."""
    monkeypatch.setattr(yaml_preset.yaml, "safe_load", lambda text: pytest.fail("PyYAML read the text"))
    with pytest.raises(PresetError, match="nest deeper than 32 levels"):
        yaml_preset.safe_load("a: " + "[" * 300 + "]" * 300)
    monkeypatch.undo()
    quoted = "a: '" + "[" * 300 + "'  # " + "{" * 300 + '\nb: "' + "[" * 300 + '"'
    assert yaml_preset.safe_load(quoted) == {"a": "[" * 300, "b": "[" * 300}


@pytest.mark.parametrize("override, problem", [
    ("agents.tiny.parameters.n_steps=100000000000", "PPO's rollout buffer of n_steps 100000000000 x n_envs"),
    ("agents.tiny.parameters.policy_kwargs={net_arch: [1000000000]}", "PPO's network of net_arch [1000000000]"),
    ("agents.tiny.parameters.policy_kwargs={net_arch: {pi: [100000, 100000], vf: [64]}}", "PPO's network of"),
])
def test_impossible_buffer_and_network_sizes_are_one_line(capsys, override, problem):
    """Sizes whose memory alone exceeds the machine's: refused before SB3 allocates (a traceback before)."""
    assert main(["check", str(TEST_PRESETS / "tiny_ppo.py"), "-cp", override]) == 2
    err = capsys.readouterr().err
    assert f"agents[0]: {problem}" in err and "more than this machine's" in err and "Traceback" not in err


def test_serving_with_a_bad_override_exits_2_before_touching_the_data_folder(tmp_path, capsys):
    data = tmp_path / "data"
    assert main(["-p", "cartpole_ppo_yaml", "-cp", "agents.cartpole.parameters.learning_rat=0.1",
                 "--data", str(data), "--port", "0"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: -cp agents.cartpole.parameters.learning_rat=0.1: unknown key 'learning_rat'")
    assert not data.exists()


def test_cp_and_seed_go_with_a_preset_only(capsys):
    with pytest.raises(SystemExit) as raised:
        main(["--seed", "3", "algorithms"])
    assert raised.value.code == 2 and "-cp and --seed change a preset" in capsys.readouterr().err


def test_a_validation_block_can_be_given_by_overrides():
    graph = load_preset(str(TEST_PRESETS / "tiny_ppo.py"), overrides=[
        "validation.env_id=CartPole-v1", "validation.target_return=10", "validation.max_steps=1000"])
    assert dataclasses.astuple(graph.validation)[:4] == ("CartPole-v1", 10.0, 1000, 1)
    found = problems_of(TEST_PRESETS / "tiny_ppo.py", "validation.env_id=CartPole-v1")
    assert found == ["-cp validation.env_id=CartPole-v1: validation.target_return: missing; a value is required",
                     "-cp validation.env_id=CartPole-v1: validation.max_steps: missing; a value is required"]


def test_parameter_bounds_are_the_commands_not_the_process(capsys):
    """``--parameter-bound`` widens a bound for the command it is given to; the next command in the same process
    (a test run, an embedding program) holds the defaults again: the bounds are carried, never set globally."""
    preset, deep = str(TEST_PRESETS / "tiny_ppo.py"), "agents.tiny.parameters.n_epochs=300"
    assert main(["--parameter-bound", "n_epochs=1:300", "check", preset, "-cp", deep]) == 0
    capsys.readouterr()
    assert main(["check", preset, "-cp", deep]) == 2
    assert "between 1 and 100, not 300" in capsys.readouterr().err


def test_a_parameter_on_the_command_line_that_is_not_finite_is_refused_there():
    """`agents add --param` and `agents set-param` read 1e400 as JSON's inf: a server holding the data folder got
    it through the remote client's JSON encoder, which raised (a traceback)."""
    import argparse

    from shepherd.cli.agents import parameter

    assert parameter("n_epochs=4") == ("n_epochs", 4)
    with pytest.raises(argparse.ArgumentTypeError, match="n_epochs must be a finite number, got '1e400'"):
        parameter("n_epochs=1e400")
