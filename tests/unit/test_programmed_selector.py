"""The programmed selector (``selector: "module:function"``, docs/levels.md): its function's skill as the index of
its action, random options in heatup, a name that is no skill refused; checkpointed and read back."""

import pytest
from gymnasium import spaces

from shepherd.agents.core import ActMode, Kind, Request
from shepherd.agents.programmed import ProgrammedSelector

FUNCTION = "shepherd.envs.corridor:toward_cue"


def build(skills="left,right", function=FUNCTION, n=2):
    return ProgrammedSelector.build("guide", spaces.Box(-1, 1, (3,)), spaces.Discrete(n),
                                    {"function": function, "skills": skills, "seed": 0}, None)


def acts(selector, *requests):
    selector.process(list(requests))
    return [answer.action for answer in selector.take_answers()]


def test_the_function_chooses_by_name_and_heatup_chooses_at_random():
    selector = build()
    left, right = [0.0, -1.0, 1.0], [0.0, 1.0, 1.0]
    assert acts(selector, Request(Kind.BEGIN, 1, left, ticket=1, mode=ActMode.EXPLORE),
                Request(Kind.STEP, 1, right, 2.0, ticket=2, mode=ActMode.GREEDY)) == [0, 1]
    chosen = acts(selector, *(Request(Kind.BEGIN, actor, left, mode=ActMode.RANDOM, ticket=actor)
                              for actor in range(40)))
    assert set(chosen) == {0, 1}  # whatever the cue says


def test_a_name_that_is_no_skill_and_a_space_that_does_not_fit_are_refused():
    selector = build(skills="up,down")
    with pytest.raises(ValueError, match="returned 'left', not one of the skills up, down"):
        selector.process([Request(Kind.BEGIN, 1, [0.0, -1.0, 1.0], ticket=1, mode=ActMode.EXPLORE)])
    with pytest.raises(ValueError, match="acts in Discrete\\(2\\), not Discrete\\(3\\)"):
        build(n=3)


def test_it_is_checkpointed_and_read_back(tmp_path):
    selector = build()
    selector.process([Request(Kind.BEGIN, 1, [0.0, -1.0, 1.0], ticket=1), Request(Kind.STEP, 1, [0.0, 1.0, 1.0], 1.0,
                                                                                 ticket=2)])
    selector.write_checkpoint(tmp_path / "model.zip", {"schedule": {"steps": 7}})
    restored = build()
    assert restored.restore(tmp_path / "model.zip")["schedule"] == {"steps": 7} and restored.steps == 1


def test_its_random_options_go_on_after_a_restore_as_they_would_have(tmp_path):
    selector = build()
    heatup = [Request(Kind.BEGIN, actor, [0.0, -1.0, 1.0], mode=ActMode.RANDOM, ticket=actor) for actor in range(20)]
    acts(selector, *heatup)
    selector.write_checkpoint(tmp_path / "model.zip", {})
    restored = build()
    restored.restore(tmp_path / "model.zip")
    assert acts(restored, *heatup) == acts(selector, *heatup)
