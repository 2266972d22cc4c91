"""``python run.py``: parse the command line and hand over to the serving or admin commands.

Exit status: 0 success, 1 the preset's target was not reached (``--clients``) or the server could not stop
cleanly (after checkpointing), 2 bad usage or input.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from shepherd.cli import agents, algorithms, coach, keys, presets, serve, users
from shepherd.cli.common import EXIT_USAGE, UsageError
from shepherd.deploy import cli as deploy

#: modules that add subcommands: each has ``add_parser(subparsers)``, which sets ``func`` (args -> exit code)
COMMAND_MODULES: list = [users, agents, keys, algorithms, presets, deploy]


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (exit status 2), pointing to the command's help."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"error: {message} (see `{self.prog} -h`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="python run.py",
        description="Shepherd: reinforcement learning as a service. Serves a preset's agents over JSON/HTTP; "
                    "with --clients it also drives them with local gymnasium clients and exits 0 once the "
                    "preset's target evaluation return is reached (1 if not, 2 on bad usage); -asc stops at the "
                    "target without --clients too, --evaluate serves greedily and learns nothing.",
        epilog="Examples: python run.py -l | python run.py -p cartpole_ppo | "
               "python run.py -p cartpole_ppo --clients 4 | "
               "python run.py -p cartpole_ppo_yaml -cp agents.cartpole.parameters.learning_rate=0.0003 --seed 1 | "
               "python run.py check cartpole_ppo_yaml | python run.py agents list | "
               "python run.py -p cartpole_ppo -crd trained-data --evaluate 10000 (Coach's options: --evaluate, "
               "-crd, -crf, -s, -asc, -e; docs/command-line.md). The admin commands work "
               "on the data folder's store when no server runs, and through the server that holds it when one "
               "does.")
    parser.add_argument("-p", "--preset", help="preset to serve: a name from -l (presets/NAME.py or "
                                               "presets/NAME.yaml), a path to a .py, .yaml or .yml file, or RL "
                                               "Zoo's hyperparameters: zoo:ALGO/ENV_ID or zoo:FILE.yml#ENV_ID")
    parser.add_argument("-l", "--list", action="store_true",
                        help="list the presets (Python and YAML, saying which) and exit")
    presets.add_preset_options(parser)
    serve.add_arguments(parser)
    parser.add_argument("-v", "--verbose", action="store_true", help="log learner and server events")
    if COMMAND_MODULES:
        commands = parser.add_subparsers(dest="command", metavar="COMMAND",
                                         title="commands: check a preset, and the admin commands "
                                               "(run `python run.py COMMAND -h` for each)")
        for module in COMMAND_MODULES:
            module.add_parser(commands)
    return parser


#: the options of `python run.py` that its commands use too (the others serve a preset, and were ignored silently)
COMMAND_OPTIONS = {"data", "experiment", "verbose", "parameter_bound"}


def _given(parser: argparse.ArgumentParser, argv: list[str], used: set[str]) -> list[str]:
    """The options among ``argv`` (as typed, ``--port`` or ``--port=1``) whose destination is not in ``used``."""
    strings = {string: action.dest for action in parser._actions for string in action.option_strings}
    return [token for token in argv if strings.get(token.split("=", 1)[0], "") not in used | {""}]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv_list = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv_list)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        args.bounds = serve.parameter_bounds(args)
        coach.apply_experiment(args)  # -e NAME: DATA/NAME, for serving and the admin commands alike
        if getattr(args, "command", None):
            if args.command == "deploy":  # run.py hands `[-v] deploy ...` to the deploy server before this parser;
                # here an option came first, and the deploy server's defaults overwrote those of the same names
                parser.error("the deploy server's options come after `deploy` (python run.py deploy POLICY --port "
                             "N ...); the options before it are the learning server's")
            if args.command != "check" and (args.overrides or args.seed is not None):
                parser.error("-cp and --seed change a preset: use them with -p PRESET or `check PRESET`")
            before = argv_list[:argv_list.index(args.command)] if args.command in argv_list else []
            unused = _given(parser, before, COMMAND_OPTIONS | ({"overrides", "seed"} if args.command == "check"
                                                               else set()))
            if unused:
                parser.error(f"{unused[0]} is for serving a preset; `{args.command}` does not use it: leave it out")
            if (args.command == "check" and args.check_data is None and Path(args.data).is_dir()
                    and (args.experiment is not None or args.data != parser.get_default("data"))):
                args.check_data = Path(args.data)  # `run.py --data D check P` as `run.py check P --data D` (a
                # folder not made yet, a new experiment's, has no stored agents to check against)
            return args.func(args)
        if args.list:
            unused = _given(parser, argv_list, {"list", "verbose"})
            if unused:
                parser.error(f"-l lists the presets and exits: {unused[0]} does nothing with it, leave it out")
            return presets.list_presets_command()
        if not args.preset:
            parser.error("give a preset with -p PRESET, -l to list them, or a command")
        return serve.serve_command(args)
    except UsageError as error:
        for line in str(error).splitlines():  # an invalid preset's problems, one a line
            print(f"error: {line}", file=sys.stderr)
        return EXIT_USAGE

