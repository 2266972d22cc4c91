"""The phase tracker: heatup, training, evaluation periods and the end of the budget."""

import pytest

from shepherd.graph import PhaseTracker, Schedule
from shepherd.level import Episode, Phase


def run_episode(tracker: PhaseTracker, steps: int, total: float = 1.0, completed: bool = True):
    phase = tracker.begin_episode()
    for _ in range(steps):
        tracker.count_step(phase)
    return phase, tracker.end_episode(Episode(phase, total, steps), completed)


def test_heatup_then_train_and_phases_change_only_between_episodes():
    tracker = PhaseTracker(Schedule(heatup_steps=10, evaluation_episodes=0))
    phase, _ = run_episode(tracker, 25)
    assert phase is Phase.HEATUP  # the whole episode stays in heatup although it passed 10 steps
    assert tracker.steps == 25
    assert run_episode(tracker, 1)[0] is Phase.TRAIN


def test_evaluation_period_takes_the_next_episodes_and_reports_their_mean():
    tracker = PhaseTracker(Schedule(steps_between_evaluation_periods=10, evaluation_episodes=2))
    run_episode(tracker, 10)
    assert tracker.phase is Phase.EVALUATE
    first = tracker.begin_episode()
    second = tracker.begin_episode()
    third = tracker.begin_episode()
    assert (first, second, third) == (Phase.EVALUATE, Phase.EVALUATE, Phase.TRAIN)
    tracker.count_step(first)  # evaluation steps are not learned and do not count
    assert tracker.steps == 10
    assert tracker.end_episode(Episode(first, 100.0, 1), True) is None
    result = tracker.end_episode(Episode(second, 50.0, 1), True)
    assert result.period == 1 and result.mean_return == 75.0 and result.returns == (100.0, 50.0)
    assert tracker.phase is Phase.TRAIN


def test_abandoned_evaluation_episode_is_replaced():
    tracker = PhaseTracker(Schedule(steps_between_evaluation_periods=5, evaluation_episodes=1))
    run_episode(tracker, 5)
    phase, result = run_episode(tracker, 3, completed=False)
    assert phase is Phase.EVALUATE and result is None
    phase, result = run_episode(tracker, 3, total=7.0)
    assert phase is Phase.EVALUATE and result.mean_return == 7.0


def test_budget_ends_with_a_final_evaluation_then_deploys():
    tracker = PhaseTracker(Schedule(improve_steps=20, steps_between_evaluation_periods=None,
                                    evaluation_episodes=1))
    run_episode(tracker, 20)
    assert tracker.budget_spent and not tracker.finished
    phase, result = run_episode(tracker, 4, total=3.0)
    assert phase is Phase.EVALUATE and result.steps == 20
    assert tracker.finished
    assert run_episode(tracker, 4)[0] is Phase.DEPLOY
    assert tracker.steps == 20


def test_state_survives_a_checkpoint_including_pending_evaluations():
    tracker = PhaseTracker(Schedule(steps_between_evaluation_periods=10, evaluation_episodes=3))
    run_episode(tracker, 10)
    run_episode(tracker, 2, total=4.0)  # one of three evaluation episodes done
    tracker.begin_episode()  # one running when the checkpoint is taken
    restored = PhaseTracker(tracker.schedule)
    restored.load(tracker.state())
    assert restored.steps == 10 and restored.period == 1 and restored.next_evaluation == 20
    assert [restored.begin_episode() for _ in range(3)] == [Phase.EVALUATE, Phase.EVALUATE, Phase.TRAIN]


def resumed(before: Schedule, after: Schedule, steps: int) -> PhaseTracker:
    """A tracker of schedule ``after`` restored from the checkpoint of ``before``'s after ``steps`` steps."""
    tracker = PhaseTracker(before)
    tracker.count_step(Phase.TRAIN, steps)
    restored = PhaseTracker(after)
    restored.load(tracker.state())
    return restored


def test_a_resume_under_a_changed_schedule_evaluates_as_the_new_schedule_says():
    """A preset's schedule may change between runs (`-cp schedule.FIELD`); the checkpoint's next period and final
    evaluation were the old schedule's (periodic evaluation turned off made every later episode an evaluation)."""
    off = resumed(Schedule(steps_between_evaluation_periods=100), Schedule(steps_between_evaluation_periods=None), 50)
    off.count_step(Phase.TRAIN, 60)
    assert off.next_evaluation is None and off.to_start == 0 and off.begin_episode() is Phase.TRAIN
    on = resumed(Schedule(steps_between_evaluation_periods=None), Schedule(steps_between_evaluation_periods=100), 50)
    on.count_step(Phase.TRAIN, 1000)
    assert on.next_evaluation == 1100 and on.to_start == 10 * 5  # ten periods opened (as one: none ran)
    shorter = resumed(Schedule(steps_between_evaluation_periods=100), Schedule(steps_between_evaluation_periods=30),
                      250)
    assert shorter.next_evaluation == 270
    raised = resumed(Schedule(improve_steps=20), Schedule(improve_steps=40), 25)  # its final evaluation started
    assert not raised.budget_spent and not raised.final_started
    raised.count_step(Phase.TRAIN, 15)
    assert raised.finished is False and raised.begin_episode() is Phase.EVALUATE  # the new budget's final one
    spent = resumed(Schedule(improve_steps=20), Schedule(improve_steps=20), 25)
    assert spent.final_started and spent.begin_episode() is Phase.EVALUATE  # the one still to run, not another
    spent.count_step(Phase.TRAIN)
    assert spent.to_start == 4


@pytest.mark.parametrize("field", ["heatup_steps", "evaluation_episodes"])
def test_negative_counts_are_refused(field):
    with pytest.raises(ValueError, match=field):
        Schedule(**{field: -1})


@pytest.mark.parametrize("chunks", [[7, 1, 30, 2, 60], [100], [1] * 100, [9, 91]])
def test_steps_counted_at_once_open_the_same_periods_as_steps_counted_one_by_one(chunks):
    schedule = Schedule(steps_between_evaluation_periods=10, evaluation_episodes=2, improve_steps=95)
    one_by_one, at_once = PhaseTracker(schedule), PhaseTracker(schedule)
    for chunk in chunks:
        for _ in range(chunk):
            one_by_one.count_step(Phase.TRAIN)
        at_once.count_step(Phase.TRAIN, chunk)
        assert at_once.state() == one_by_one.state()
    at_once.count_step(Phase.EVALUATE, 50)  # not learned: not counted
    assert at_once.state() == one_by_one.state() and at_once.steps == 100
