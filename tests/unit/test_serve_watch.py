"""`run.py --clients` decides its outcome from the validated agent's evaluations, across restarts."""

import asyncio
from types import SimpleNamespace

from shepherd.cli.serve import EXIT_OK
from shepherd.graph.validation import Outcome, watch
from shepherd.graph import PresetValidation
from shepherd.graph.schedule import EvaluationResult


def runtime(agent_id, client=None):
    return SimpleNamespace(record=SimpleNamespace(id=agent_id), tracker=SimpleNamespace(finished=False),
                           client=client)


def test_an_evaluation_of_the_restarted_agent_still_decides_the_run():
    graph = SimpleNamespace(validation=PresetValidation("CartPole-v1", target_return=475, max_steps=10_000),
                            evaluation_listeners=[])
    outcome, stop = Outcome(), asyncio.Event()
    watch(graph, 7, outcome, stop)
    (listener,) = graph.evaluation_listeners
    listener(runtime(8), EvaluationResult(1, 500, 500.0, (500.0,)))  # another agent: not ours
    assert outcome.code is None and not stop.is_set()
    listener(runtime(7), EvaluationResult(1, 600, 480.0, (480.0,)))  # a new runtime of agent 7 (restarted)
    assert outcome.code == EXIT_OK and stop.is_set() and "target reached" in outcome.reason


def test_an_advised_agent_reaches_the_target_once_every_clients_last_evaluation_does():
    advised = SimpleNamespace(clients={"local-0": None, "local-1": None})
    graph = SimpleNamespace(validation=PresetValidation("CartPole-v1", target_return=475, max_steps=10_000),
                            evaluation_listeners=[], served=SimpleNamespace(agents={7: advised}))
    outcome, stop = Outcome(), asyncio.Event()
    watch(graph, 7, outcome, stop)
    (listener,) = graph.evaluation_listeners
    listener(runtime(7, "local-0"), EvaluationResult(1, 500, 500.0, (500.0,)))
    assert outcome.code is None  # local-1 has not reached it yet
    listener(runtime(7, "local-1"), EvaluationResult(1, 500, 300.0, (300.0,)))
    listener(runtime(7, "local-0"), EvaluationResult(2, 1_000, 200.0, (200.0,)))  # local-0 fell back below
    listener(runtime(7, "local-1"), EvaluationResult(2, 1_000, 490.0, (490.0,)))
    assert outcome.code is None and not stop.is_set()
    listener(runtime(7, "local-0"), EvaluationResult(3, 1_500, 480.0, (480.0,)))
    assert outcome.code == EXIT_OK and stop.is_set()
    assert "every client (local-0, local-1)" in outcome.reason and "local-0 480.0, local-1 490.0" in outcome.reason


def test_the_graph_decides_with_the_exit_statuses_of_run_py():
    from shepherd.cli.common import EXIT_NOT_REACHED
    from shepherd.graph.validation import NOT_REACHED, REACHED

    assert (REACHED, NOT_REACHED) == (EXIT_OK, EXIT_NOT_REACHED)


def test_below_the_target_the_run_is_decided_only_once_the_budget_is_spent():
    from shepherd.graph.validation import NOT_REACHED, judge

    validation = PresetValidation("CartPole-v1", target_return=475, max_steps=10_000)
    assert not judge(validation, EvaluationResult(1, 5_000, 100.0, (100.0,))).decided
    assert judge(validation, EvaluationResult(1, 5_000, 100.0, (100.0,)), budget_finished=True).code == NOT_REACHED
    late = judge(validation, EvaluationResult(2, 10_000, 474.9, (474.9,)))
    assert late.code == NOT_REACHED and not late.reached and "474.9 < 475" in late.reason
    assert judge(validation, EvaluationResult(3, 10_000, 475.0, (475.0,))).reached


def test_a_local_client_not_yet_logged_in_holds_the_run_open():
    advised = SimpleNamespace(clients={"local-0": None})  # local-1 has not logged in yet
    graph = SimpleNamespace(validation=PresetValidation("CartPole-v1", target_return=475, max_steps=10_000),
                            evaluation_listeners=[], served=SimpleNamespace(agents={7: advised}))
    outcome, stop = Outcome(), asyncio.Event()
    watch(graph, 7, outcome, stop, ["local-0", "local-1"])
    (listener,) = graph.evaluation_listeners
    listener(runtime(7, "local-0"), EvaluationResult(1, 500, 500.0, (500.0,)))
    assert outcome.code is None and not stop.is_set()
    advised.clients["local-1"] = None
    listener(runtime(7, "local-1"), EvaluationResult(1, 500, 480.0, (480.0,)))
    assert outcome.code == EXIT_OK and "every client (local-0, local-1)" in outcome.reason
