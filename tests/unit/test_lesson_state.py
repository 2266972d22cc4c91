"""An agent's lesson state (shepherd/graph/lessons.py): K evaluations *in a row*, moves by hand, checkpoint state."""

import json

import pytest

from shepherd.graph.lessons import LessonState, UnknownLesson
from shepherd.lessons import parse_lessons

LESSONS = parse_lessons([{"name": "a", "config": {"x": 1}, "until": {"evaluation_return": 10, "evaluations": 2}},
                         {"name": "b", "config": {"x": {"uniform": [0, 1]}}}])


def test_k_evaluations_in_a_row_advance_and_a_miss_starts_the_count_again():
    state = LessonState(LESSONS, seed=0)
    assert [state.observe(r) for r in (10, 9, 12)] == [None, None, None]  # the miss broke the streak
    assert state.name == "a" and state.streak == 1 and not state.at_last
    assert state.observe(11) == "b" and state.at_last and state.streak == 0
    assert state.observe(100) is None and state.name == "b"  # the last lesson has no until
    assert state.draw().lesson == "b"


def test_moves_by_hand_and_the_checkpoint_state():
    state = LessonState(LESSONS)
    state.observe(10)
    assert {key: state.state()[key] for key in ("lesson", "streak")} == {"lesson": "a", "streak": 1}
    restored = LessonState(LESSONS)
    restored.load(state.state())
    assert (restored.name, restored.streak) == ("a", 1)
    restored.move("b")
    assert restored.name == "b" and restored.streak == 0
    with pytest.raises(UnknownLesson, match="the lessons are 'a', 'b'"):
        restored.move("c")
    stale = LessonState(LESSONS)
    stale.load({"lesson": "gone", "streak": 3})  # a lesson the agent no longer has: it starts in the first
    assert (stale.name, stale.streak) == ("a", 0)
    assert LessonState(()).draw() is None and LessonState(()).state() is None


def test_a_restored_state_draws_the_configs_the_old_one_would_have_drawn():
    state = LessonState(LESSONS, seed=4)
    state.move("b")
    [state.draw() for _ in range(3)]
    saved = json.loads(json.dumps(state.state()))  # as the checkpoint's shepherd.json holds it
    restored = LessonState(LESSONS, seed=9)
    restored.load(saved)
    assert [restored.draw() for _ in range(5)] == [state.draw() for _ in range(5)]
    older = LessonState(LESSONS, seed=9)
    older.load({"lesson": "b", "streak": 0})  # a checkpoint written before generators were saved
    assert older.name == "b"
