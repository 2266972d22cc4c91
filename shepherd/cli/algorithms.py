"""``python run.py algorithms [NAME]``: the algorithms agents can run, and an algorithm's typed parameters."""

from __future__ import annotations

import argparse
import json
import textwrap

from shepherd.cli.common import EXIT_OK, UsageError

TYPE_NAMES = {1: "int", 2: "float", 3: "bool", 4: "str", 5: "json"}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "algorithms", help="list the algorithms, or one algorithm's parameters with types and defaults",
        description="Without NAME: every algorithm (stable-baselines3's and sb3-contrib's), whether it is on- "
                    "or off-policy, whether it takes action masks, the action spaces it handles, and the "
                    "algorithms not served, with the reason. With NAME: its parameters (stable-baselines3's, as a preset or an agent sets "
                    "them), their types (1 int, 2 float, 3 bool, 4 str as in the original Shepherd; 5 JSON), "
                    "defaults and meaning. The same registry is written to the store at start-up.")
    parser.add_argument("name", nargs="?", metavar="NAME", help="an algorithm, such as SAC")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=algorithms_command)


def algorithms_command(args: argparse.Namespace) -> int:
    from shepherd.agents import ParameterError, algorithm_info, parameters, registry_records
    from shepherd.agents.registry import NOT_SERVED

    algorithms, _ = registry_records()
    if not args.name:
        if args.json:
            print(json.dumps(algorithms, indent=2))
            return EXIT_OK
        print(f"{'algorithm':<13} {'learner':<11} {'continuous':<11} {'masks':<6} {'package':<18} action spaces")
        for row in algorithms:
            print(f"{row['name']:<13} {'on-policy' if row['on_policy'] else 'off-policy':<11} "
                  f"{'yes' if row['continuous'] else 'no':<11} {'yes' if row['action_mask'] else 'no':<6} "
                  f"{row['package']:<18} {', '.join(row['action_spaces'])}")
        for name, reason in NOT_SERVED.items():
            print(textwrap.fill(f"not served: {name}: {reason}.", 100, initial_indent="\n",
                                subsequent_indent="  "))
        print("\n`python run.py algorithms NAME` lists an algorithm's parameters; masks: whether a step may "
              "carry an \"action_mask\".")
        return EXIT_OK
    try:
        info = algorithm_info(args.name)
        params = parameters(info.name)
    except ParameterError as error:
        raise UsageError(str(error)) from None
    if args.json:
        print(json.dumps([p.record() for p in params.values()], indent=2))
        return EXIT_OK
    print(f"{info.name} ({'on' if info.on_policy else 'off'}-policy; actions: "
          f"{', '.join(s.__name__ for s in info.action_spaces)})")
    width = max(map(len, params))
    for param in params.values():
        kind = f"{int(param.type)} {TYPE_NAMES[int(param.type)]}"
        accepts = [word for flag, word in ((param.nullable, "or null"), (param.schedule, "or lin_<start>"),
                                           (param.text, "or a string")) if flag]
        if param.choices:
            accepts.append("one of " + ", ".join(param.choices))
        print(f"  {param.name:<{width}}  {kind:<7} default {json.dumps(param.default)}"
              f"{'  (' + '; '.join(accepts) + ')' if accepts else ''}")
        if param.doc:
            print(textwrap.fill(param.doc, 100, initial_indent=" " * (width + 4),
                                subsequent_indent=" " * (width + 4)))
    excluded = dict(info.excluded)
    if excluded:
        print("  not available in Shepherd: " + "; ".join(f"{k} ({v})" for k, v in excluded.items()))
    return EXIT_OK
