"""A preset declares a level on a selector (docs/levels.md), in YAML and Python alike; bad levels are refused
with every problem named by its key path."""

from __future__ import annotations

import pytest

from shepherd.graph import AgentSpec, InvalidPreset, Preset, PresetError, programmed_selector
from shepherd.hierarchy import LevelError, LevelSpec
from shepherd.loading.yaml_preset import preset_data, preset_from_data

OBS = [[2], -1.0, 1.0]
TINY = {"n_steps": 8, "batch_size": 8}


def skill(name, obs=OBS, action=2):
    return {"name": name, "algorithm": "PPO", "observation_space": obs, "action_space": action, "parameters": TINY}


def selector(level, **extra):
    return {"name": "pilot", "algorithm": "PPO", "observation_space": OBS, "action_space": 2, "parameters": TINY,
            "level": level, **extra}


def problems(*agents):
    with pytest.raises(InvalidPreset) as raised:
        preset_from_data({"agents": list(agents)})
    return sorted((problem.path, problem.message) for problem in raised.value.problems)


def test_a_yaml_selector_declares_its_level_and_reads_back_from_its_plain_form():
    preset = preset_from_data({"agents": [skill("left"), skill("right"),
                                          selector({"skills": ["left", "right"], "option_steps": 5})]})
    assert preset.agents[2].level == LevelSpec(("left", "right"), 5, False)
    assert preset_from_data(preset_data(preset)).agents == preset.agents


def test_a_programmed_selector_takes_the_place_of_the_algorithm_in_yaml_and_python():
    data = {"name": "pilot", "selector": "shepherd.envs.corridor:toward_cue", "observation_space": OBS,
            "level": {"skills": ["left", "right"], "option_steps": 10}}
    preset = preset_from_data({"agents": [skill("left"), skill("right"), data]})
    pilot = preset.agents[2]
    assert (pilot.algorithm, pilot.action_space) == ("Programmed", 2)
    assert pilot.parameters == {"function": "shepherd.envs.corridor:toward_cue", "skills": "left,right"}
    python = programmed_selector("pilot", "shepherd.envs.corridor:toward_cue", OBS,
                                 {"skills": ["left", "right"], "option_steps": 10})
    assert python == pilot
    Preset((AgentSpec("left", "PPO", OBS, 2, TINY), AgentSpec("right", "PPO", OBS, 2, TINY), python)).check()


def test_every_problem_of_the_levels_is_named_by_its_key_path():
    found = problems(skill("left"), skill("wide", obs=[[3], -1.0, 1.0]), skill("three", action=3),
                     selector({"skills": ["left", "wide", "three", "ghost"]}))
    # 'ghost' is no agent of the preset: it may be one of the data folder's, checked when served (below)
    assert [path for path, _ in found] == ["agents[3].action_space", "agents[3].level.skills[1]",
                                          "agents[3].level.skills[2]"]
    messages = dict(found)
    assert "Discrete(4)" in messages["agents[3].action_space"]
    assert "observes" in messages["agents[3].level.skills[1]"]
    assert "acts in 3" in messages["agents[3].level.skills[2]"]


def folder_problems(stored, *agents):
    """The levels' problems of a preset of ``agents`` with the data folder's agents ``stored`` seen."""
    preset = preset_from_data({"agents": list(agents)})
    with pytest.raises(InvalidPreset) as raised:
        preset.check_skills({spec["name"]: preset_from_data({"agents": [spec]}).agents[0] for spec in stored})
    return sorted((problem.path, problem.message) for problem in raised.value.problems)


def test_a_skill_of_the_data_folder_is_checked_as_a_presets_once_the_folder_is_seen():
    pilot = {**selector({"skills": ["left", "balance"]})}
    preset = preset_from_data({"agents": [skill("left"), pilot]})
    assert preset.folder_skills() == {"balance"}
    preset.check_skills({"balance": preset_from_data({"agents": [skill("balance")]}).agents[0]})  # same spaces: ok
    assert folder_problems([skill("other")], skill("left"), pilot) == [
        ("agents[1].level.skills[1]", "unknown skill 'balance': neither an agent of this preset nor an agent of the "
                                      "preset's owner in the data folder is named so")]
    wide = {**selector({"skills": ["wide"]}), "action_space": 1}
    (found,) = folder_problems([skill("wide", obs=[[3], -1.0, 1.0])], wide)
    assert found[0] == "agents[0].level.skills[0]" and "skill 'wide' (of the data folder) observes" in found[1]
    looping = {**selector({"skills": ["b"]}), "action_space": 1}
    b = {**selector({"skills": ["pilot"]}), "name": "b", "action_space": 1}  # a stored selector over this one
    assert folder_problems([b], looping) == [("agents[0].level.skills", "a cycle of levels: pilot -> b -> pilot; "
                                                                        "a skill cannot choose its own selector")]


def test_cycles_are_refused_once_each_and_a_nested_level_is_not_served():
    own = {**selector({"skills": ["pilot"]}), "action_space": 1}
    assert problems(own) == [("agents[0].level.skills", "a cycle of levels: pilot -> pilot; a skill cannot "
                                                         "choose its own selector")]
    a = {**selector({"skills": ["b"]}), "name": "a", "action_space": 1}
    b = {**selector({"skills": ["a"]}), "name": "b", "action_space": 1}
    assert problems(a, b) == [("agents[0].level.skills", "a cycle of levels: a -> b -> a; a skill cannot choose "
                                                         "its own selector")]
    nested = {**selector({"skills": ["inner"]}), "action_space": 1}
    inner = {**selector({"skills": ["left"]}), "name": "inner", "action_space": 1}
    assert [path for path, _ in problems(skill("left"), inner, nested)] == ["agents[2].level.skills[0]"]


@pytest.mark.parametrize(("level", "path"), [
    ({"skills": ["left"], "option_steps": 0}, "agents[1].level.option_steps"),
    ({"skills": ["left"], "option_steps": 2.5}, "agents[1].level.option_steps"),
    ({"skills": []}, "agents[1].level.skills"),
    ({"skills": ["left", "left"]}, "agents[1].level.skills[1]"),
    ({"skills": ["left"], "skills_learn": "yes"}, "agents[1].level.skills_learn"),
    ({"skills": ["left"], "steps": 3}, "agents[1].level.steps"),
    ({"skills": ["left"], "skill_ends": {"left": "no.such.module:f"}}, "agents[1].level.skill_ends.left"),
])
def test_a_malformed_level_is_refused_at_its_key(level, path):
    assert [p for p, _ in problems(skill("left"), {**selector(level), "action_space": 1})] == [path]


def test_a_selector_and_an_algorithm_together_and_a_bad_function_are_refused():
    both = {**selector({"skills": ["left"]}), "selector": "shepherd.envs.corridor:toward_cue", "action_space": 1}
    assert [p for p, _ in problems(skill("left"), both)] == ["agents[1].selector"]
    bad = {"name": "pilot", "selector": "shepherd.envs.corridor:nothing", "observation_space": OBS,
           "level": {"skills": ["left"]}}
    assert [p for p, _ in problems(skill("left"), bad)] == ["agents[1].selector"]


def test_python_levels_are_checked_when_declared():
    with pytest.raises(LevelError, match="level.option_steps"):
        AgentSpec("pilot", "PPO", OBS, 2, level={"skills": ["a"], "option_steps": 0})


def test_the_bundled_example_loads_and_cp_sets_a_levels_key_by_its_path():
    from shepherd.loading import load_preset
    from tests.conftest import ROOT

    path = str(ROOT / "presets" / "corridor_levels.yaml")
    pilot = load_preset(path, overrides=("agents.pilot.level.option_steps=5",)).agents[3]
    assert pilot.level == LevelSpec(("left", "right"), 5, False)
    with pytest.raises(InvalidPreset) as raised:
        load_preset(path, overrides=("agents.pilot.level.option_steps=0",))
    assert [problem.path for problem in raised.value.problems] == ["agents[3].level.option_steps"]
    with pytest.raises(PresetError, match="unknown key 'steps' in agents.pilot.level"):
        load_preset(path, overrides=("agents.pilot.level.steps=3",))
