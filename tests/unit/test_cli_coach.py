"""Coach's options of ``run.py -p PRESET`` at the parser (`shepherd.cli.coach`): what each flag parses into, that
the earlier flags keep their meanings, the combinations refused in one line, -e's folder, -s's schedules, and
-asc deciding on a reached target only."""

import argparse
import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from shepherd.cli import coach
from shepherd.cli.common import UsageError
from shepherd.cli.main import build_parser, main
from shepherd.graph import AgentSpec, GraphManager, PresetError, PresetValidation, Schedule
from shepherd.graph.schedule import EvaluationResult
from shepherd.graph.validation import Outcome, watch


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["-p", "tiny", *argv])


def test_each_flag_parses_into_its_value_and_coach_s_long_names_too():
    plain = parse()
    assert (plain.evaluate, plain.checkpoint_restore_dir, plain.checkpoint_restore_file, plain.checkpoint_seconds,
            plain.apply_stop_condition, plain.experiment) == (None, None, None, None, False, None)
    assert parse("--evaluate").evaluate == 0 and parse("--evaluate", "500").evaluate == 500
    for short, long_, coach_name, dest, value, parsed in [
            ("-crd", "--checkpoint-restore-dir", "--checkpoint_restore_dir", "checkpoint_restore_dir", "old", Path("old")),
            ("-crf", "--checkpoint-restore-file", "--checkpoint_restore_file", "checkpoint_restore_file", "m.zip",
             Path("m.zip")),
            ("-s", "--checkpoint-save-secs", "--checkpoint_save_secs", "checkpoint_seconds", "30", 30.0),
            ("-e", "--experiment-name", "--experiment_name", "experiment", "run-1", "run-1")]:
        for flag in (short, long_, coach_name):
            assert getattr(parse(flag, value), dest) == parsed, flag
    for flag in ("-asc", "--apply-stop-condition", "--apply_stop_condition"):
        assert parse(flag).apply_stop_condition is True


def test_the_earlier_short_flags_keep_their_meanings_beside_the_new_ones():
    args = parse("-cp", "schedule.evaluation_episodes=3", "--seed", "7", "-s", "5", "-v", "-e", "x")
    assert args.preset == "tiny" and args.overrides == ["schedule.evaluation_episodes=3"] and args.seed == 7
    assert args.checkpoint_seconds == 5.0 and args.verbose and args.experiment == "x"
    assert build_parser().parse_args(["-l"]).list


def test_crd_and_crf_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as exited:
        parse("-crd", "old", "-crf", "m.zip")
    assert exited.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["--evaluate", "-1"], "--evaluate N: N must be 0"),
    (["--evaluate", "-s", "5"], "--evaluate writes no checkpoint"),
    (["--evaluate", "-asc"], "-asc stops at an evaluation"),
    (["-crd", "shepherd-data"], "is the data folder itself"),
])
def test_combinations_that_mean_nothing_are_refused(argv, words):
    with pytest.raises(UsageError, match=words):
        coach.check_arguments(parse(*argv))


def test_e_names_a_folder_of_its_own_under_data_for_serving_and_the_admin_commands(capsys, tmp_path):
    args = parse("-e", "run-1", "--data", str(tmp_path))
    coach.apply_experiment(args)
    assert args.data == tmp_path / "run-1"
    admin = build_parser().parse_args(["-e", "run-1", "agents", "list", "--data", str(tmp_path)])
    coach.apply_experiment(admin)
    assert admin.data == tmp_path / "run-1"
    for bad in ("../up", "a/b", ""):
        with pytest.raises(UsageError, match="-e: an experiment name is 1 to 64 letters"):
            coach.apply_experiment(parse("-e", bad))
    assert main(["-e", "../up", "agents", "list", "--data", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: -e: an experiment name")


def graph(validation=None):
    return GraphManager(owner="tests", agents=[AgentSpec("pole", "PPO", [[4], "-inf", "inf"], 2, {})],
                        schedule=Schedule(checkpoint_every_seconds=60.0), validation=validation)


def test_s_sets_the_checkpoint_period_of_the_preset_and_of_the_other_agents():
    manager = graph()
    assert coach.apply_to_graph(manager, parse("-s", "2.5")) is None
    assert manager.schedule.checkpoint_every_seconds == 2.5 and manager.default_schedule.checkpoint_every_seconds == 2.5
    assert manager.schedule.checkpoint_every_steps == Schedule().checkpoint_every_steps  # the rest as it was


def test_asc_needs_a_validation_block():
    with pytest.raises(PresetError, match="has no validation block, so -asc has no target"):
        coach.apply_to_graph(graph(), parse("-asc"))


def test_asc_without_clients_is_decided_by_a_reached_target_only():
    validation = PresetValidation("CartPole-v1", target_return=475, max_steps=1_000)
    manager = SimpleNamespace(validation=validation, evaluation_listeners=[])
    outcome, stop = Outcome(), asyncio.Event()
    watch(manager, 7, outcome, stop, reached_only=True)
    (listener,) = manager.evaluation_listeners
    runtime = SimpleNamespace(record=SimpleNamespace(id=7), tracker=SimpleNamespace(finished=False), client=None)
    listener(runtime, EvaluationResult(1, 2_000, 100.0, (100.0,)))  # past max_steps: --clients would stop, 1
    assert outcome.code is None and not stop.is_set()
    listener(runtime, EvaluationResult(2, 3_000, 480.0, (480.0,)))
    assert outcome.code == 0 and stop.is_set() and "target reached" in outcome.reason


async def test_evaluate_with_local_clients_ends_once_every_client_exited():
    manager = SimpleNamespace(every_runtime=lambda: [])  # nothing served yet: 0 steps
    clients = [SimpleNamespace(returncode=None), SimpleNamespace(returncode=None)]
    outcome, stop = Outcome(), asyncio.Event()
    watcher = asyncio.create_task(coach.stop_after(manager, 100, outcome, stop, clients))
    await asyncio.sleep(3 * coach.EVALUATE_POLL_SECONDS)
    clients[0].returncode = 0
    await asyncio.sleep(3 * coach.EVALUATE_POLL_SECONDS)
    assert not stop.is_set()  # one still runs
    clients[1].returncode = 1
    await asyncio.wait_for(watcher, 5)
    assert stop.is_set() and outcome.code == 1 and outcome.reason == "every local client exited (status 0, 1)"


def test_a_preset_with_a_selector_is_served_under_ray(tmp_path, monkeypatch):
    """Issue 45: selectors are served under --ray (they were refused at start); tests/e2e/test_composition_ray.py
    serves every shape of a selector with its learners in Ray actors."""
    from shepherd.cli import serve

    served = []
    monkeypatch.setattr(serve, "serve_on_ray", lambda graph, *args: served.append(graph.name) or 0)
    assert main(["-p", "corridor_levels", "--ray", "--data", str(tmp_path), "--port", "0"]) == 0
    assert served == ["corridor_levels"]