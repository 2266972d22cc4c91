"""Coach's command line, where it fits a service: ``run.py -p PRESET --evaluate [N]`` (serve greedily, learn
nothing, stop after N env steps), ``-crd DIR`` / ``-crf FILE`` (start from other checkpoints), ``-s SECONDS``
(the checkpoint period), ``-asc`` (stop once the validation target is reached) and ``-e NAME`` (an experiment's
own data folder under ``--data``). docs/command-line.md says them with examples."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from shepherd.arguments import seconds
from shepherd.cli.common import EXIT_NOT_REACHED, EXIT_OK, UsageError
from shepherd.definition import name_problem
from shepherd.graph import GraphManager, PresetError
from shepherd.graph.start_from import StartingCheckpoints
from shepherd.graph.validation import Outcome
from shepherd.level import Phase

#: how often ``--evaluate N`` looks whether N env steps were served (a few sums of counters: costs nothing)
EVALUATE_POLL_SECONDS = 0.01


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--evaluate", nargs="?", const=0, type=int, default=None, metavar="N",
                        help="serve every session greedily and learn nothing: every login is answered in evaluate "
                             "mode, whatever it asked (its reply says \"mode\": \"evaluate\", as the deploy server's "
                             "does), no weight changes and no checkpoint or training metrics are written; stop once N env steps were served "
                             "(summed over every session and agent, looked at every 0.01 s: the steps answered "
                             "meanwhile and while it stops are served too, and counted in the lines it prints at the "
                             "end), or, with 0 or no N, when stopped (Ctrl-C). Exit status 0")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("-crd", "--checkpoint-restore-dir", "--checkpoint_restore_dir", dest="checkpoint_restore_dir",
                       type=Path, metavar="DIR",
                       help="start the preset's agents from the checkpoints of the agents of the same names in the data "
                            "folder DIR (their models, counters and schedule progress; an advised agent's every "
                            "client); an agent that has a model in --data resumes its own. Refused with exit status 2 "
                            "when an agent is missing there, or its algorithm, spaces or network differ")
    start.add_argument("-crf", "--checkpoint-restore-file", "--checkpoint_restore_file", dest="checkpoint_restore_file",
                       type=Path, metavar="FILE",
                       help="start the one agent of a one-agent preset (pooled) from the model zip FILE (a Shepherd "
                            "checkpoint, as `run.py agents export` writes, or SB3's own zip), unless it has a model in "
                            "--data; refused with exit status 2 when its spaces or network differ")
    parser.add_argument("-s", "--checkpoint-save-secs", "--checkpoint_save_secs", dest="checkpoint_seconds",
                        type=seconds, default=None, metavar="SECONDS",
                        help="the checkpoint period: an agent checkpoints at its first learned step once SECONDS "
                             "seconds have passed since its last checkpoint (sets the preset's "
                             "schedule.checkpoint_every_seconds, 60 unless the preset says, and that of the data "
                             "folder's other agents; a checkpoint also comes every schedule.checkpoint_every_steps "
                             "steps, and at the stop)")
    parser.add_argument("-asc", "--apply-stop-condition", "--apply_stop_condition", dest="apply_stop_condition",
                        action="store_true",
                        help="stop (checkpointing) and exit 0 once an evaluation of the preset's validated agent reaches "
                             "its validation target, also when serving without --clients (remote clients train it; "
                             "serving goes on past the validation's max_steps until it does). --clients always stops "
                             "at the target")
    parser.add_argument("-e", "--experiment-name", "--experiment_name", dest="experiment", default=None, metavar="NAME",
                        help="a named experiment: its data folder is DATA/NAME, a folder of its own under --data (for "
                             "serving and for the admin commands alike)")


def apply_experiment(args: argparse.Namespace) -> None:
    """``-e NAME``: the data folder becomes ``DATA/NAME``.

    Raises:
        UsageError: NAME is not one folder name.
    """
    name = getattr(args, "experiment", None)
    if name is None:
        return
    problem = name_problem(name, "experiment")
    if problem:
        raise UsageError(f"-e: {problem}")
    args.data = Path(args.data) / name


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse the combinations that mean nothing.

    Raises:
        UsageError: one line saying which and why.
    """
    if args.evaluate is not None and args.evaluate < 0:
        raise UsageError("--evaluate N: N must be 0 (until stopped) or more env steps")
    if args.checkpoint_seconds is not None and not args.checkpoint_seconds > 0:
        raise UsageError("-s SECONDS must be positive")
    if args.evaluate is not None and args.checkpoint_seconds is not None:
        raise UsageError("-s sets the checkpoint period, and --evaluate writes no checkpoint: leave one out")
    if args.evaluate is not None and args.apply_stop_condition:
        raise UsageError("-asc stops at an evaluation that reaches the target, and --evaluate learns nothing, so no "
                         "evaluation period comes: leave one out")
    restore = args.checkpoint_restore_dir
    if restore is not None and Path(restore).resolve() == Path(args.data).resolve():
        raise UsageError(f"-crd {restore} is the data folder itself: its agents resume their checkpoints anyway")


def apply_to_graph(graph: GraphManager, args: argparse.Namespace) -> StartingCheckpoints | None:
    """``-s`` into the graph's schedules, and the checkpoints ``-crd`` or ``-crf`` name, checked against the
    preset (builds each agent's learner once: a few seconds).

    Raises:
        PresetError: the preset is invalid (every problem), ``-asc`` without a validation block, or the
            checkpoints do not fit (one line).
    """
    if args.checkpoint_seconds is not None:
        seconds = args.checkpoint_seconds
        graph.preset = replace(graph.preset, schedule=replace(graph.schedule, checkpoint_every_seconds=seconds))
        graph.default_schedule = replace(graph.default_schedule, checkpoint_every_seconds=seconds)
    if args.apply_stop_condition and graph.validation is None:
        raise PresetError(f"preset {graph.name} has no validation block, so -asc has no target")
    if args.checkpoint_restore_dir is None and args.checkpoint_restore_file is None:
        return None
    graph.check(args.bounds)
    if args.checkpoint_restore_dir is not None:
        return StartingCheckpoints.of_folder(args.checkpoint_restore_dir, graph.preset)
    return StartingCheckpoints.of_file(args.checkpoint_restore_file, graph.preset)


def start_lines(args: argparse.Namespace, start_from: StartingCheckpoints | None) -> tuple[str, ...]:
    """What the options change, for the start-up lines: where each agent started from, how the run stops."""
    lines = []
    if start_from is not None:
        lines += [f"  agent {name} starts from {start_from.shown}" for name in start_from.laid]
        lines += [f"  agent {name} resumes its own model in the data folder ({start_from.shown} starts agents without "
                  "one)" for name in start_from.models if name not in start_from.laid]
    if args.evaluate is not None:
        until = f"it stops after {args.evaluate:,} env steps" if args.evaluate else "it serves until stopped"
        lines.append(f"--evaluate: every login is answered in evaluate mode (greedy actions, nothing learned); {until}")
    if args.apply_stop_condition and not args.clients:
        lines.append("-asc: the server stops once an evaluation of the validated agent reaches the preset's target")
    return tuple(lines)


def evaluated_steps(graph: GraphManager) -> int:
    """The env steps served in evaluate mode so far (every served learner's, since it started)."""
    return sum(runtime.phase_steps[Phase.DEPLOY] for runtime in graph.every_runtime())


async def stop_after(graph: GraphManager, steps: int, outcome: Outcome, stop: asyncio.Event,
                     clients: Sequence[asyncio.subprocess.Process] = ()) -> None:
    """``--evaluate N``: set ``stop`` once ``steps`` env steps were served (0: never), or once every local
    client (``--clients``) exited; ``outcome`` says which."""
    while not stop.is_set():
        if steps and evaluated_steps(graph) >= steps:
            outcome.code, outcome.reason = EXIT_OK, f"--evaluate {steps}: stopped at {evaluated_steps(graph):,} env steps"
            stop.set()
        elif clients and all(process.returncode is not None for process in clients):
            codes = ", ".join(str(process.returncode) for process in clients)
            outcome.code, outcome.reason = EXIT_NOT_REACHED, f"every local client exited (status {codes})"
            stop.set()
        else:
            await asyncio.sleep(EVALUATE_POLL_SECONDS)


def evaluation_lines(graph: GraphManager) -> list[str]:
    """What an ``--evaluate`` run served, one line per served learner that took steps."""
    return [f"agent {runtime.label}: {runtime.phase_steps[Phase.DEPLOY]:,} env steps, "
            f"{runtime.phase_episodes[Phase.DEPLOY]:,} episodes completed in evaluate mode (their returns are on its "
            "curve, phase deploy)" for runtime in graph.every_runtime() if runtime.phase_steps[Phase.DEPLOY]]
