"""Lessons on an agent (issue 38): the schema in Python and YAML, the samplers, refusals with their key path,
and the store keeping them (an older store without the field loads with none)."""

import json

import numpy as np
import pytest
import yaml

from shepherd.graph.preset import AgentSpec
from shepherd.lessons import Choice, Constant, Lesson, LessonError, Normal, Uniform, Until, parse_lessons
from shepherd.loading.yaml_preset import preset_from_data
from shepherd.graph.preset import InvalidPreset
from shepherd.storage import Store

YAML = """
agents:
  - name: cartpole
    algorithm: PPO
    observation_space: [[4], -inf, inf]
    action_space: 2
    lessons:
      - name: short pole
        config: {length: 0.25, force_mag: 10.0}
        until: {evaluation_return: 300, evaluations: 2}
      - name: varied
        config: {length: {uniform: [0.4, 0.8]}, force_mag: {choice: [8.0, 10.0, 12.0]}, noise: {normal: [0, 0.1]}}
"""


def yaml_data():
    return yaml.safe_load(YAML)


def test_yaml_and_python_declare_the_same_lessons():
    preset = preset_from_data(yaml_data())
    lessons = preset.agents[0].lessons
    python = AgentSpec("cartpole", "PPO", [[4], "-inf", "inf"], 2, lessons=[
        Lesson("short pole", {"length": 0.25, "force_mag": 10.0}, until=Until(300, 2)),
        {"name": "varied", "config": {"length": Uniform(0.4, 0.8), "force_mag": Choice((8.0, 10.0, 12.0)),
                                      "noise": {"normal": [0, 0.1]}}}])
    assert python.lessons == lessons
    assert lessons[0].config == {"length": Constant(0.25), "force_mag": Constant(10.0)}
    assert lessons[0].until == Until(300.0, 2) and lessons[1].until is None
    assert lessons[1].config["noise"] == Normal(0, 0.1)
    # the plain form reads back to the same lessons (a YAML preset written from a Python one)
    assert parse_lessons(json.loads(json.dumps(python.to_json()["lessons"]))) == lessons
    assert "lessons" not in AgentSpec("a", "PPO", [[4], "-inf", "inf"], 2).to_json()  # none: not written


def test_samplers_draw_in_range_and_reproducibly_from_a_seeded_generator():
    lesson = preset_from_data(yaml_data()).agents[0].lessons[1]
    draws = [lesson.draw(np.random.default_rng(7)) for _ in range(2)]
    assert draws[0] == draws[1]  # the same seed, the same configs
    rng = np.random.default_rng(0)
    many = [lesson.draw(rng) for _ in range(300)]
    assert all(0.4 <= d["length"] <= 0.8 and d["force_mag"] in (8.0, 10.0, 12.0) for d in many)
    assert {d["force_mag"] for d in many} == {8.0, 10.0, 12.0}
    assert len({d["length"] for d in many}) == 300  # drawn afresh for every episode
    assert abs(float(np.std([d["noise"] for d in many])) - 0.1) < 0.03
    assert all(type(d["length"]) is float for d in many)  # plain JSON values, not numpy's


@pytest.mark.parametrize("change, path, words", [
    (lambda ls: ls[1]["config"].update(length={"uniform": [0.8, 0.4]}),
     "agents[0].lessons[1].config.length.uniform", "must not be above"),
    (lambda ls: ls[1]["config"].update(length={"normal": [0.5, -1]}),
     "agents[0].lessons[1].config.length.normal", "std must not be negative"),
    (lambda ls: ls[1]["config"].update(force_mag={"choice": []}),
     "agents[0].lessons[1].config.force_mag.choice", "at least one value"),
    (lambda ls: ls[1]["config"].update(length={"unifrom": [0.4, 0.8]}),
     "agents[0].lessons[1].config.length", "one sampler"),
    (lambda ls: ls[1]["config"].update(length={"uniform": [0.4]}),
     "agents[0].lessons[1].config.length.uniform", "two numbers"),
    (lambda ls: ls[0].pop("until"), "agents[0].lessons[1]", "has no 'until'"),
    (lambda ls: ls[1].update(until={"evaluation_return": 1}), "agents[0].lessons[1].until", "last lesson"),
    (lambda ls: ls[0]["until"].update(evaluations=0), "agents[0].lessons[0].until.evaluations", "at least 1"),
    (lambda ls: ls[0]["until"].update(evaluation_retrun=3), "agents[0].lessons[0].until.evaluation_retrun",
     "unknown key"),
    (lambda ls: ls[1].update(name="short pole"), "agents[0].lessons[1].name", "also named"),
    (lambda ls: ls.clear(), "agents[0].lessons", "empty list"),
    (lambda ls: ls[1]["config"].update(table=["x" * 100] * 200), "agents[0].lessons[1].config",
     "at most 16,384"),  # issue 48, H2: a config travels to the client before every episode
    # values each check accepted, then every draw (numpy's OverflowError) or every reply (orjson's TypeError) was
    # a 500 at each login, or at each episode's end once the agent advanced into the lesson
    (lambda ls: ls[1]["config"].update(length={"uniform": [-1e308, 1e308]}),
     "agents[0].lessons[1].config.length.uniform", "high - low must be a finite number"),
    (lambda ls: ls[1]["config"].update(length={"normal": [1e308, 1e308]}),
     "agents[0].lessons[1].config.length.normal", "keep every draw finite"),
    (lambda ls: ls[1]["config"].update(seed=2 ** 64), "agents[0].lessons[1].config.seed", "must be a number"),
    (lambda ls: ls[1]["config"].update(seed=10 ** 400), "agents[0].lessons[1].config.seed", "must be a number"),
    (lambda ls: ls[1]["config"].update(seeds={"choice": [1, -2 ** 63 - 1]}),
     "agents[0].lessons[1].config.seeds.choice", "must be numbers"),
])
def test_bad_lessons_are_refused_at_load_with_their_key_path(change, path, words):
    data = yaml_data()
    change(data["agents"][0]["lessons"])
    with pytest.raises(InvalidPreset) as caught:
        preset_from_data(data)
    problems = caught.value.problems
    assert len(problems) == 1 and problems[0].path == path and words in problems[0].message, problems


def test_a_lesson_of_constants_draws_one_object_and_a_sampled_one_draws_anew():
    constant, sampled = Lesson("c", {"length": 0.25, "table": [1, 2]}), Lesson("s", {"length": {"uniform": [0, 1]}})
    rng = np.random.default_rng(0)
    assert constant.draw(rng) is constant.draw(rng) and constant.draw(rng) == {"length": 0.25, "table": [1, 2]}
    assert sampled.draw(rng) is not sampled.draw(rng)


def test_python_presets_refuse_bad_lessons_with_the_path_too():
    with pytest.raises(LessonError, match=r"lessons\[0\]\.config\.x\.uniform: low"):
        AgentSpec("a", "PPO", [[4], "-inf", "inf"], 2, lessons=[{"name": "a", "config": {"x": {"uniform": [2, 1]}}}])
    with pytest.raises(LessonError, match=r"^lessons: an empty list"):
        AgentSpec("a", "PPO", [[4], "-inf", "inf"], 2, lessons=[])


def test_the_store_keeps_lessons_and_older_stores_load_with_none(tmp_path):
    lessons = preset_from_data(yaml_data()).agents[0].lessons
    plain = [lesson.to_json() for lesson in lessons]
    store = Store(tmp_path / "data")
    user = store.ensure_user("alice")
    with_lessons = store.add_agent(user.id, "pole", "PPO", [[4], "-inf", "inf"], 2, {}, lessons=plain)
    without = store.add_agent(user.id, "plain", "PPO", [[4], "-inf", "inf"], 2, {})
    store.close()
    saved = json.loads((tmp_path / "data" / "store.json").read_text())
    assert "lessons" not in saved["agents"][str(without.id)]  # an older version reads this store still
    reopened = Store(tmp_path / "data")
    assert reopened.agent(with_lessons.id).definition.lessons == lessons
    assert reopened.agent(without.id).definition.lessons == ()
    reopened.close()
