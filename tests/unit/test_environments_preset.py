"""Environments with roles in presets (docs/how-to/multi-agent.md): YAML and Python (`EnvironmentSpec`) read alike,
every problem refused at load with its key path, `run.py check` showing each environment, the store keeping them
and `run.py keys add OWNER/ENVIRONMENT` making a key that logs in to them."""

from __future__ import annotations

import pytest
import yaml

from shepherd.cli import main
from shepherd.environments import EnvironmentSpec, SelfPlay
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.graph.preset import InvalidPreset, Preset
from shepherd.loading.yaml_preset import preset_data, preset_from_data
from shepherd.storage import Store

OBS = [[2], -1.0, 1.0]
TINY = {"n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0, "policy_kwargs": {"net_arch": [8]}}
PRESET = f"""
owner: tests
agents:
  - {{name: raider, algorithm: PPO, observation_space: {OBS}, action_space: 2, parameters: {{n_steps: 8, batch_size: 8}}}}
  - {{name: guard, algorithm: PPO, observation_space: {OBS}, action_space: 2, parameters: {{n_steps: 8, batch_size: 8}}}}
  - {{name: c4, algorithm: PPO, observation_space: {OBS}, action_space: 3, parameters: {{n_steps: 8, batch_size: 8}}}}
environments:
  - name: defence
    roles: {{attacker: raider, defender: guard}}
    turns: simultaneous
    teams: {{red: [attacker], blue: [defender]}}
  - name: connect4
    roles: {{player_0: c4, player_1: c4}}
    turns: alternate
    self_play: {{snapshot_every: 10000, window: 10, against_latest: 0.5, swap_every: 2000,
                opponents: ["benchmarks.boards:minimax"]}}
"""


def problems_of(data) -> dict[str, str]:
    with pytest.raises(InvalidPreset) as error:
        preset_from_data(data)
    return {problem.path: problem.message for problem in error.value.problems}


def test_a_yaml_preset_reads_its_environments_as_a_python_preset_declares_them():
    preset = preset_from_data(yaml.safe_load(PRESET))
    assert preset.environments == (
        EnvironmentSpec("defence", {"attacker": "raider", "defender": "guard"}, "simultaneous",
                        {"red": ("attacker",), "blue": ("defender",)}),
        EnvironmentSpec("connect4", {"player_0": "c4", "player_1": "c4"}, "alternate",
                        self_play=SelfPlay(10000, 10, 0.5, 2000, ("benchmarks.boards:minimax",))))
    assert list(preset.environments[0].roles) == ["attacker", "defender"]  # the declared order: alternate turns
    assert preset_from_data(preset_data(preset)) == preset  # the plain form (-cp overrides) keeps them


@pytest.mark.parametrize("change, path, words", [
    ({"roles": {"attacker": "no body", "defender": "guard"}}, "environments[0].roles.attacker", "must name an agent"),
    ({"teams": {"red": ["attacker", "spy"]}}, "environments[0].teams.red[1]", "names no role"),
    ({"teams": {"red": ["attacker"], "blue": ["attacker"]}}, "environments[0].teams.blue[0]", "in team 'red'"),
    ({"turns": "sometimes"}, "environments[0].turns", "simultaneous, alternate, any"),
    ({"self_play": {"window": 0}}, "environments[0].self_play.window", "at least 1"),
    ({"self_play": {"against_latest": 1.5}}, "environments[0].self_play.against_latest", "probability"),
    ({"self_play": {"opponents": ["minimax"]}}, "environments[0].self_play.opponents[0]", "module:function"),
    ({"self_play": {"opponent_actions": "argmax"}}, "environments[0].self_play.opponent_actions", "sample, greedy"),
    ({"self_play": {}, "teams": {}}, "environments[0].self_play", "one agent per team"),
    ({"colour": "red"}, "environments[0].colour", "unknown key"),
    ({"roles": {"attacker": "raider", "defender": "nomodule:play"}}, "environments[0].roles.defender",
     "cannot be imported"),
    ({"self_play": {"opponents": ["benchmarks.boards:nobody"]}, "roles": {"attacker": "raider", "defender": "raider"}},
     "environments[0].self_play.opponents[0]", "has no function"),
])
def test_a_bad_environment_is_refused_at_load_with_its_key_path(change, path, words):
    data = yaml.safe_load(PRESET)
    data["environments"][0].update(change)
    if path.endswith("attacker"):
        data["environments"][0].pop("teams")
    problems = problems_of(data)
    assert path in problems, problems
    assert words in problems[path]


def test_self_play_of_one_agent_per_team_needs_the_same_spaces_and_names_are_unique():
    data = yaml.safe_load(PRESET)
    data["environments"][0]["self_play"] = {}
    data["environments"][0]["roles"] = {"attacker": "raider", "defender": "c4"}  # 2 and 3 actions
    assert "spaces must be the same" in problems_of(data)["environments[0].roles"]
    data = yaml.safe_load(PRESET)
    data["environments"][1]["name"] = "defence"
    assert "declared twice" in problems_of(data)["environments[1].name"]


def test_a_team_named_as_a_role_in_no_team_is_refused():
    """A role in no team is a team of its own named as the role: a declared team of that name merged the two (under
    self-play, one team: nothing played or rated), and nothing said so."""
    data = yaml.safe_load(PRESET)
    data["environments"][0]["teams"] = {"attacker": ["defender"]}
    assert "is named as role 'attacker'" in problems_of(data)["environments[0].teams.attacker"]
    data["environments"][0]["teams"] = {"attacker": ["attacker", "defender"]}  # the role in its own-named team
    preset_from_data(data)
    data["environments"][0]["teams"] = {"attacker": ["defender"], "blue": ["attacker"]}  # placed elsewhere
    preset_from_data(data)


def test_a_python_presets_environments_are_checked_alike():
    preset = Preset((AgentSpec("raider", "PPO", OBS, 2, TINY),), Schedule(),
                    environments=(EnvironmentSpec("duel", {"a": "raider", "b": "raider"}, "in turn"),))
    assert {p.path for p in preset.problems()} == {"environments[0].turns"}


def test_a_role_naming_no_agent_is_refused_once_the_data_folder_is_seen(tmp_path):
    """A name the preset lacks may be a stored agent of its owner (as a selector's skill may): `run.py check
    --data DIR` and the server's start refuse it when the folder has none."""
    environments = (EnvironmentSpec("duel", {"a": "raider", "b": "elsewhere"}, "alternate"),)
    graph = GraphManager(owner="tests", agents=[AgentSpec("raider", "PPO", OBS, 2, TINY)],
                         schedule=Schedule(), environments=environments)
    assert graph.problems() == []  # not known at load: the owner's stored agents may have it
    store = Store(tmp_path / "data")
    try:
        with pytest.raises(InvalidPreset, match=r"environments\[0\].roles.b: names agent 'elsewhere'"):
            graph.create_graph(store)
    finally:
        graph.close()
        store.close()


def test_check_shows_each_environment(tmp_path, capsys):
    path = tmp_path / "duel.yaml"
    path.write_text(PRESET)
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "environment defence: roles attacker: raider, defender: guard; turns simultaneous" in out
    assert "teams: red: attacker; blue: defender" in out
    assert "environment connect4: roles player_0: c4, player_1: c4; turns alternate" in out
    assert "self-play: a snapshot every 10,000 steps, window 10" in out
    assert "opponents' actions sampled" in out  # the default


def test_opponents_actions_are_sampled_unless_the_preset_says_greedy():
    data = yaml.safe_load(PRESET)
    assert preset_from_data(data).environments[1].self_play.opponent_actions == "sample"
    data["environments"][1]["self_play"]["opponent_actions"] = "greedy"
    preset = preset_from_data(data)
    assert preset.environments[1].self_play.opponent_actions == "greedy"
    assert preset_from_data(preset_data(preset)) == preset


def test_keys_add_owner_environment_makes_a_key_that_logs_in_to_it(tmp_path, capsys):
    data = tmp_path / "data"
    graph = GraphManager.of(preset_from_data(yaml.safe_load(PRESET)))
    store = Store(data)
    keys = graph.create_graph(store)
    assert set(keys) == {"raider", "guard", "c4", "environment defence", "environment connect4"}
    graph.close()
    store.close()
    assert main(["keys", "add", "tests/defence", "--data", str(data)]) == 0
    key = capsys.readouterr().out.splitlines()[-1]
    store = Store(data)
    try:
        assert store.environment_for_key(key).name == "defence"
        assert store.environment_for_key(keys["environment connect4"]).name == "connect4"
        assert store.agent_for_key(key) is None
    finally:
        store.close()
    assert main(["keys", "add", "tests/nothing", "--data", str(data)]) == 2
    assert "no agent or environment 'tests/nothing'" in capsys.readouterr().err


def test_keys_list_and_revoke_take_an_environments_keys_as_an_agents(tmp_path, capsys):
    data = tmp_path / "data"
    graph = GraphManager.of(preset_from_data(yaml.safe_load(PRESET)))
    store = Store(data)
    keys = graph.create_graph(store)
    graph.close()
    store.close()
    assert main(["keys", "add", "tests/defence", "--label", "robot", "--data", str(data)]) == 0
    out = capsys.readouterr().out
    assert "API key e3 for environment tests/defence" in out  # e1, e2: the preset's, one per environment
    key = out.splitlines()[-1]
    assert main(["keys", "list", "--data", str(data)]) == 0
    rows = [line.split()[:3] for line in capsys.readouterr().out.splitlines()]
    assert rows[0] == ["ID", "FOR", "LABEL"]
    assert [row for row in rows if row[0].startswith("e")] == [
        ["e1", "environment", "tests/defence"], ["e2", "environment", "tests/connect4"],
        ["e3", "environment", "tests/defence"]]
    assert ["1", "agent", "tests/raider"] in rows
    assert main(["keys", "list", "tests/defence", "--data", str(data)]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]] == ["e1", "e3"]
    assert main(["keys", "revoke", "e3", "--data", str(data)]) == 0
    assert "API key e3 of environment tests/defence revoked" in capsys.readouterr().out
    assert main(["keys", "list", "defence", "--data", str(data)]) == 0
    assert capsys.readouterr().out.splitlines()[2].split()[-1] == "revoked"
    store = Store(data)
    try:
        assert store.environment_for_key(key) is None  # refused from now on
        assert store.environment_for_key(keys["environment defence"]).name == "defence"  # the other key works
        assert store.agent_for_key(keys["raider"]).name == "raider"  # agents' keys 1..3 are another namespace
    finally:
        store.close()
    for wrong, words in (("e9", "no environment key with id 9"), ("e", "no key id"), ("x3", "no key id"),
                         ("e0", "no key id")):
        assert main(["keys", "revoke", wrong, "--data", str(data)]) == 2
        assert words in capsys.readouterr().err


def test_a_role_played_by_a_selector_or_an_advised_agent_is_refused_at_load():
    """A selector playing a role answered with its skills' numbers (its own action space) where the env takes
    actions, and no skill was asked; an advised agent's role failed every login (a training login names a
    client, an environment's cannot). A role is played by a pooled agent, as one env of it."""
    from shepherd.graph import programmed_selector

    preset = Preset((AgentSpec("left", "PPO", OBS, 2, TINY), AgentSpec("right", "PPO", OBS, 2, TINY),
                     programmed_selector("guide", "shepherd.envs.corridor:toward_cue", OBS,
                                         {"skills": ["left", "right"], "option_steps": 5}),
                     AgentSpec("coach", "PPO", OBS, 2, TINY, sharing="advised")), Schedule(),
                    environments=(EnvironmentSpec("race", {"walker": "guide", "rival": "left", "pupil": "coach"},
                                                  "simultaneous"),))
    problems = {p.path: p.message for p in preset.problems()}
    assert set(problems) == {"environments[0].roles.walker", "environments[0].roles.pupil"}
    assert "'guide' is a selector" in problems["environments[0].roles.walker"]
    assert "'coach' is advised" in problems["environments[0].roles.pupil"]


def test_cp_sets_an_environments_field_by_its_name(tmp_path):
    """`-cp environments.NAME.FIELD=VALUE`, as agents are addressed; before, the environment's name was looked up
    among the validation block's keys ("unknown key 'defence' in environments; known: env_id, ...")."""
    from shepherd.loading import load_preset

    path = tmp_path / "duel.yaml"
    path.write_text(PRESET)
    preset = load_preset(str(path), overrides=["environments.defence.turns=alternate",
                                               "environments.connect4.self_play.window=3",
                                               "environments.defence.roles.attacker=guard"])
    defence, connect4 = preset.environments
    assert defence.turns == "alternate" and connect4.self_play.window == 3
    assert defence.roles == {"attacker": "guard", "defender": "guard"}
    for override, words in (("environments.duel.turns=any", "no environment named 'duel' in environments; known: "
                                                           "defence, connect4"),
                            ("environments.defence.colour=red", "unknown key 'colour' in environments.defence"),
                            ("environments.connect4.self_play.windows=3", "unknown key 'windows' in "
                                                                          "environments.connect4.self_play")):
        with pytest.raises(InvalidPreset, match=words):
            load_preset(str(path), overrides=[override])


@pytest.mark.parametrize("where", ["after", "before", "abbreviated", "experiment", "new experiment"])
def test_check_reads_the_data_folder_given_before_the_command_too(tmp_path, capsys, where):
    """`run.py --data D check P` (command-line.md: the commands take --data and -e before them) checked nothing
    against D: check read only its own --data, and said ok for a role naming an agent D does not have."""
    path = tmp_path / "unknown.yaml"
    path.write_text("owner: tests\nagents:\n  - {name: raider, algorithm: PPO, observation_space: 2, action_space: 2}\n"
                    "environments:\n  - {name: duel, roles: {a: raider, b: elsewhere}, turns: alternate}\n")
    data = tmp_path / "data"
    store = Store(data / "run1" if where == "experiment" else data)
    store.add_user("tests")
    store.close()
    argv = {"after": ["check", str(path), "--data", str(data)], "before": ["--data", str(data), "check", str(path)],
            "abbreviated": [f"--dat={data}", "check", str(path)],
            "experiment": ["--data", str(data), "-e", "run1", "check", str(path)],
            "new experiment": ["--data", str(data), "-e", "run2", "check", str(path)]}[where]
    if where == "new experiment":  # no folder yet, no stored agents: checked when it is served, as without --data
        assert main(argv) == 0 and not (data / "run2").exists()
        return
    assert main(argv) == 2
    assert "environments[0].roles.b: names agent 'elsewhere'" in capsys.readouterr().err
