"""A server without --clients prints a progress line per agent whose counters changed, at most every interval."""

from shepherd.cli.progress import ProgressLines, progress_line
from shepherd.graph import AgentStats
from shepherd.graph.schedule import EvaluationResult


def stats(name="pole", steps=0, sessions=0, episodes=0, phase="train", train=None, evaluation=None, rate=0.0):
    return AgentStats(agent=name, steps=steps, steps_per_second=rate, phase=phase, sessions=sessions,
                      episodes=episodes, mean_train_return=train, last_evaluation=evaluation, failure=None)


def test_a_line_holds_steps_rate_phase_sessions_train_return_and_last_evaluation():
    line = progress_line(stats(steps=12_345, rate=321.4, sessions=2, train=87.25,
                               evaluation=EvaluationResult(3, 10_000, 150.0, (150.0,))))
    assert line == ("steps   12,345 |    321 steps/s | phase train    | sessions 2 | train return 87.2 | "
                    "eval 150.0 @ 10,000")
    assert progress_line(stats()).endswith("train return - | eval -")


def test_only_agents_whose_counters_changed_get_a_line_at_most_once_per_interval():
    lines = ProgressLines(interval=10)
    assert lines.lines({1: stats(steps=500), 2: stats("idle", steps=9_000)}, now=0) == []  # as found: quiet
    assert lines.lines({1: stats(steps=500), 2: stats("idle", steps=9_000)}, now=1) == []  # nothing changed
    (line,) = lines.lines({1: stats(steps=800, sessions=1), 2: stats("idle", steps=9_000)}, now=2)
    assert line.startswith("agent pole (id 1): steps      800 |") and "sessions 1" in line
    assert lines.lines({1: stats(steps=900, sessions=1)}, now=5) == []  # changed, but a line 3 s ago
    (line,) = lines.lines({1: stats(steps=2_000, sessions=1)}, now=12)
    assert "steps    2,000" in line
    assert lines.lines({1: stats(steps=2_000, sessions=1)}, now=30) == []  # stopped training: quiet again
    (line,) = lines.lines({1: stats(steps=2_000, sessions=0)}, now=31)  # its client left
    assert "sessions 0" in line


def test_an_agent_added_or_restarted_while_serving_is_reported_once_it_moves():
    lines = ProgressLines(interval=10)
    lines.lines({1: stats(steps=100)}, now=0)
    assert lines.lines({1: stats(steps=100), 2: stats("new")}, now=1) == []  # a new agent, idle
    (line,) = lines.lines({1: stats(steps=100), 2: stats("new", steps=50)}, now=2)
    assert line.startswith("agent new (id 2):")
    assert lines.lines({2: stats("new", steps=50)}, now=3) == []  # agent 1 no longer served
    assert lines.lines({1: stats(steps=0)}, now=4) == []  # served again (restarted): a fresh start, quiet


def test_a_schedule_in_words():
    from shepherd.cli.progress import describe_schedule
    from shepherd.graph import DEFAULT_SCHEDULE, Schedule

    assert describe_schedule(DEFAULT_SCHEDULE) == "train forever, evaluate 5 episodes every 10,000 steps"
    assert describe_schedule(Schedule(heatup_steps=1_000, improve_steps=50_000)) == (
        "heatup 1,000 steps (random actions), train until 50,000 steps (then act greedily, unlearned), "
        "no periodic evaluation")


def test_an_advised_agents_clients_get_a_line_each_named_agent_slash_client():
    lines = ProgressLines(interval=10)
    found = {1: stats(steps=10), (2, "arm-1"): stats("arms/arm-1"), (2, "arm-2"): stats("arms/arm-2")}
    assert lines.lines(found, now=0) == []
    moved = {**found, (2, "arm-2"): stats("arms/arm-2", steps=64, sessions=1)}
    (line,) = lines.lines(moved, now=1)
    assert line.startswith("agent arms/arm-2 (id 2): steps       64 |")
