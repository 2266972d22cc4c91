"""``python run.py agents``: add, list and show agents, print their training metrics, and the seed's special
actions: export the model zip, delete it, delete the learning curve, restart the agent."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from shepherd.cli.admin import add_data_option, command, table, when
from shepherd.cli.common import EXIT_OK, UsageError
from shepherd.definition import Sharing

AGENT_HELP = "the agent: its id, owner/name, or a name only one agent has"
#: shepherd.admin.EXPORT_FORMATS, not imported here: the admin package imports torch, and --help must not wait
EXPORT_FORMATS = ("sb3", "onnx")


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "agents", help="add, list and show agents; export, delete or restart their models",
        description="Agents: an owner, an algorithm, spaces and parameter values. A running server serves "
                    "an agent as soon as it is added; otherwise the next server start does.")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    add = actions.add_parser(
        "add", help="add an agent for a user",
        description="Add an agent. Spaces use the JSON syntax of docs/protocol.md: an integer n is "
                    "Discrete(n), [shape, low, high] is a Box, an object of such specs is a Dict.",
        epilog="Example: python run.py agents add alice cartpole --algorithm PPO "
               "--observation-space '[[4], \"-inf\", \"inf\"]' --action-space 2 --param n_steps=64 --key")
    add.add_argument("owner", help="the user who owns it (see `users add`)")
    add.add_argument("name", help="its name, unique for its owner: 1-64 letters, digits, '_', '.' or '-'")
    add.add_argument("--algorithm", required=True, help="the algorithm, e.g. PPO or DQN (checked against the registry)")
    add.add_argument("--observation-space", required=True, type=json_value, metavar="JSON",
                     help='e.g. \'[[4], "-inf", "inf"]\'')
    add.add_argument("--action-space", required=True, type=json_value, metavar="JSON", help="e.g. 2")
    add.add_argument("--param", action="append", default=[], type=parameter, metavar="NAME=VALUE",
                     help="a stable-baselines3 parameter, checked against its type; repeat for more "
                          "(VALUE is read as JSON when it parses, e.g. policy_kwargs='{\"net_arch\": [64, 64]}')")
    add.add_argument("--sharing", default=Sharing.POOLED.value, choices=[mode.value for mode in Sharing],
                     help="knowledge sharing: pooled (one learner for every client) or advised (a learner per "
                          "named client, advised by the best other client; docs/advice.md) (default %(default)s)")
    add.add_argument("--filters", type=json_value, metavar="JSON", default=None,
                     help="observation and reward filters, e.g. '{\"normalize_observations\": true, "
                          "\"normalize_rewards\": true}' (fields: docs/filters.md)")
    add.add_argument("--key", action="store_true", help="also create an API key for it and print it")
    add_data_option(add)
    add.set_defaults(func=command(add_agent))

    listing = actions.add_parser("list", help="list the agents with their phase, steps and sessions",
                                 description="List the agents.")
    add_data_option(listing)
    listing.set_defaults(func=command(list_agents))

    for name, work, summary in (
            ("show", show_agent, "show an agent: spaces, parameters, phase, steps, sessions, model, keys, and the "
                                 "ratings of the environments with roles it plays"),
            ("delete-model", delete_model, "delete the agent's saved model zip"),
            ("delete-curve", delete_curve, "delete the agent's learning curve (its episode returns)"),
            ("restart", restart_agent, "forget the agent's model and counters and end its sessions"),
            ("delete", delete_agent, "delete the agent: its sessions end (clients get 410), its API keys are "
                                     "removed, its folder (model, returns) moves to the data folder's trash/")):
        sub = actions.add_parser(name, help=summary, description=summary[0].upper() + summary[1:] + ".")
        sub.add_argument("agent", help=AGENT_HELP)
        add_data_option(sub)
        sub.set_defaults(func=command(work))

    metrics = actions.add_parser(
        "metrics", help="print the agent's latest training metrics (loss, entropy, epsilon, steps/s, ...)",
        description="Print the latest value of each training metric the agent's learner wrote (SB3's logger "
                    "and Shepherd's own, from <data>/agents/ID/metrics/progress.csv); open the whole run with "
                    "`tensorboard --logdir <data>/agents/ID/metrics`.")
    metrics.add_argument("agent", help=AGENT_HELP)
    metrics.add_argument("--rows", type=int, default=50, metavar="N",
                         help="look back this many rows for each metric's latest value (default %(default)s)")
    add_data_option(metrics)
    metrics.set_defaults(func=command(show_metrics))

    set_param = actions.add_parser(
        "set-param", help="change parameters that a live learner honours, without a restart",
        description="Change parameters of an agent that its learner honours between two updates (learning_rate, "
                    "ent_coef, clip_range, exploration rates, ...: the error names those of its algorithm); "
                    "typed and checked like preset values. A running server's learner takes them before its next "
                    "update; the store keeps them, so a restart keeps them. A preset's agent takes the preset's "
                    "values again when that preset is served: change the preset (or its -cp) too.",
        epilog="Example: python run.py agents set-param cartpole learning_rate=0.0001 ent_coef=0.01")
    set_param.add_argument("agent", help=AGENT_HELP)
    set_param.add_argument("values", nargs="+", type=parameter, metavar="NAME=VALUE",
                           help="a parameter and its value (read as JSON when it parses: 0.0001, \"lin_0.001\")")
    add_data_option(set_param)
    set_param.set_defaults(func=command(set_parameters))

    lesson = actions.add_parser(
        "lesson", help="move an agent to one of its lessons by hand",
        description="Move an agent to one of its lessons (docs/lessons.md). On the server that serves it: the "
                    "episodes that start from now on draw their configs from it (a session's next episode was "
                    "announced already, and keeps its config), its evaluations count toward its 'until', and "
                    "its checkpoint keeps it. With no server running: the lesson is written into its checkpoint "
                    "(an advised agent's: every client's), so that the next serve starts there; an agent without a "
                    "checkpoint yet is refused (it starts in its first lesson).",
        epilog="Example: python run.py agents lesson cartpole varied")
    lesson.add_argument("agent", help=AGENT_HELP)
    lesson.add_argument("name", help="the lesson's name, as the preset gives it")
    add_data_option(lesson)
    lesson.set_defaults(func=command(set_lesson))

    export = actions.add_parser("export", help="write the agent's model zip (stable-baselines3's format) or its "
                                               "greedy policy as ONNX",
                                description="Write the agent's model zip (--format sb3; load it with e.g. "
                                            "PPO.load(path)) or its greedy policy as one ONNX file (--format onnx: "
                                            "observation filters and action unscaling included, runs with "
                                            "onnxruntime alone; see docs/export.md). A running server "
                                            "checkpoints the agent first.")
    export.add_argument("agent", help=AGENT_HELP)
    export.add_argument("--format", choices=EXPORT_FORMATS, default="sb3",
                        help="sb3: stable-baselines3's zip; onnx: the greedy policy (default %(default)s)")
    export.add_argument("--client", metavar="NAME",
                        help="an advised agent's client to export (default: the client with the best recent "
                             "evaluation return); its own network, without its advisor's advice (docs/export.md)")
    export.add_argument("-o", "--output", type=Path,
                        help="file to write (default OWNER-NAME-model.zip, or OWNER-NAME-policy.onnx, with -CLIENT "
                             "after NAME for --client), outside the data folder")
    export.add_argument("--force", action="store_true", help="replace the output file if it exists")
    add_data_option(export)
    export.set_defaults(func=command(export_model))


def json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not valid JSON: {text!r}") from None


def parameter(text: str) -> tuple[str, Any]:
    name, sep, raw = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        value = json.loads(raw, parse_constant=_no_constant)
    except ValueError:
        value = raw  # a plain string; the parameter's type decides whether that is right
    if isinstance(value, float) and not math.isfinite(value):  # json reads 1e400 as inf
        raise argparse.ArgumentTypeError(f"{name.strip()} must be a finite number, got {raw!r}")
    return name.strip(), value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a value")


async def add_agent(operations, args: argparse.Namespace) -> int:
    from shepherd.admin import NewAgent
    from shepherd.definition import AgentDefinition

    parameters = dict(args.param)
    if len(parameters) != len(args.param):
        raise UsageError("a parameter is given twice")
    try:
        definition = AgentDefinition(name=args.name, algorithm=args.algorithm, parameters=parameters,
                                     observation_space=args.observation_space, action_space=args.action_space,
                                     sharing=args.sharing, filters=args.filters)
    except ValueError as error:
        raise UsageError(str(error)) from None
    view = await operations.add_agent(NewAgent(owner=args.owner, definition=definition))
    served = "served now" if view.served else "served at the next server start"
    print(f"agent {view.ref} added (id {view.id}, {view.algorithm}; {served})")
    if args.key:
        created = await operations.add_key(view.id, "created with the agent")
        print(f"API key {created.id} (shown once, the store keeps only its hash):")
        print(created.key)
    else:
        print(f"create an API key for it with: python run.py keys add {view.ref}")
    return EXIT_OK


async def list_agents(operations, args: argparse.Namespace) -> int:
    agents = await operations.agents()
    if not agents:
        print("no agents")
        return EXIT_OK
    print(table(["ID", "AGENT", "ALGORITHM", "PHASE", "STEPS", "STEPS/S", "SESSIONS", "LAST ACTIVE"],
                [[a.id, a.ref, a.algorithm, a.phase, a.steps, f"{a.steps_per_second:.0f}", a.sessions,
                  when(a.last_active)] for a in agents]))
    return EXIT_OK


async def show_agent(operations, args: argparse.Namespace) -> int:
    view = await operations.agent(await operations.resolve(args.agent))
    evaluation = view.last_evaluation
    model = view.model
    rows = [
        ("algorithm", f"{view.algorithm} (knowledge sharing: {view.sharing})"),
        ("observation space", json.dumps(view.observation_space)),
        ("action space", json.dumps(view.action_space)),
        ("parameters", ", ".join(f"{k}={json.dumps(v)}" for k, v in view.parameters.items()) or "SB3's defaults"),
        ("filters", ", ".join(f"{k}={json.dumps(v)}" for k, v in view.filters.items()) or "none"),
        ("phase", view.phase + (f" ({view.failure})" if view.failure else "")),
        ("steps", f"{view.steps} ({view.steps_per_second:.1f} steps/s)"),
        ("sessions", view.sessions),
        ("episodes", f"{view.episodes} since the server started" if view.served else "-"),
        ("last evaluation", "-" if evaluation is None else
         f"mean return {evaluation['mean_return']:.2f} at {evaluation['steps']} steps"),
        ("model", "none" if model is None else f"{model['bytes']} bytes, saved {when(model['modified'])}"),
        ("last activity", when(view.last_active)),
        ("created", when(view.created)),
    ]
    if (await operations.whoami())["role"] == "admin":
        keys = await operations.keys(view.id)
        rows.append(("API keys", ", ".join(f"{k.id}{' (revoked)' if k.revoked else ''}"
                                           f"{' ' + repr(k.label) if k.label else ''}" for k in keys) or "none"))
    print(f"agent {view.ref} (id {view.id})")
    for label, value in rows:
        print(f"  {label:<18}{value}")
    if view.level is not None:
        _show_level(view.level)
    if (await operations.whoami())["role"] == "admin":
        _show_ratings(view, await operations.environments())
    if view.clients is not None:
        print(table(["CLIENT", "PHASE", "STEPS", "SESSIONS", "EPISODES", "TRAIN RETURN", "RECENT EVALUATION",
                     "ADVISOR"],
                    [[c["client"], c["phase"] + (f" ({c['failure']})" if c["failure"] else ""), c["steps"],
                      c["sessions"], c["episodes"], _number(c["mean_train_return"]), _number(c["recent_return"]),
                      c["advisor"] or "-"] for c in view.clients]) if view.clients else "  no client yet")
    return EXIT_OK


def _show_level(level: dict) -> None:
    """A selector's level and, while served, its options' use (docs/levels.md)."""
    print(f"  {'level':<18}skills {', '.join(level['skills'])}; at most {level['option_steps']} steps per option; "
          f"skills {'learn' if level['skills_learn'] else 'frozen'}")
    options = level.get("options")
    if options:
        print(table(["OPTION", "CHOSEN", "STEPS", "MEAN STEPS", "REWARD"],
                    [[skill, use["chosen"], use["steps"], _number(use["mean_steps"]), _number(use["reward"])]
                     for skill, use in options.items()]))


def _show_ratings(view, environments: list[dict]) -> None:
    """The ratings table of each environment with roles the agent plays (docs/how-to/multi-agent.md), best first."""
    for environment in environments:
        owner = environment["environment"].rsplit("/", 1)[0]
        if owner != view.owner or view.name not in environment["roles"].values():
            continue
        roles = ", ".join(f"{role}: {player}" for role, player in environment["roles"].items())
        print(f"  environment {environment['environment']} (roles {roles})")
        ratings = environment.get("ratings")
        if not ratings:
            print("    " + ("no rated episode yet" if ratings is not None else
                          "no ratings here: its first role's agent is not served and has no checkpoint"))
            continue
        print(table(["PLAYER", "MU", "SIGMA", "ORDINAL", "GAMES"],
                    [[player, f"{r['mu']:.2f}", f"{r['sigma']:.2f}", f"{r['ordinal']:.2f}", r["games"]]
                     for player, r in ratings.items()]))


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


async def export_model(operations, args: argparse.Namespace) -> int:
    from shepherd.storage import atomic_write_bytes

    view = await operations.agent(await operations.resolve(args.agent))
    onnx = args.format == "onnx"
    stem = f"{view.owner}-{view.name}" + (f"-{args.client}" if args.client else "")
    path = args.output or Path(f"{stem}-{'policy.onnx' if onnx else 'model.zip'}")
    if path.resolve().is_relative_to(Path(args.data).resolve()):
        raise UsageError(f"{path} is inside the data folder {args.data}, which only the server writes; "
                         "give -o a path outside it")
    if path.exists() and not args.force:
        raise UsageError(f"{path} exists; add --force to replace it, or give another -o")
    data = await operations.export_policy(view.id, args.format, args.client)
    try:
        atomic_write_bytes(path, data)
    except OSError as error:
        raise UsageError(f"cannot write {path}: {error.strerror or error}") from None
    whose = f"agent {view.ref}" + (f", client {args.client}" if args.client else "")
    if view.sharing == "advised" and not args.client:
        whose += " (its best client)"
    print(f"{'greedy policy (ONNX)' if onnx else 'model'} of {whose} written to {path} ({len(data)} bytes)")
    return EXIT_OK


async def show_metrics(operations, args: argparse.Namespace) -> int:
    if not 1 <= args.rows <= 10_000:
        raise UsageError("--rows must be between 1 and 10000")
    agent_id = await operations.resolve(args.agent)
    found = await operations.metrics(agent_id, args.rows)
    latest: dict[str, Any] = {}
    for row in found.rows:  # each metric's value in the last row that has one
        latest.update({name: value for name, value in zip(found.columns, row) if value is not None})
    if not latest:
        print("no training metrics yet: they are written once the agent learns")
        return EXIT_OK
    print(table(["METRIC", "LATEST"], [[name, f"{value:.6g}" if isinstance(value, float) else value]
                                       for name, value in sorted(latest.items())]))
    return EXIT_OK


async def delete_model(operations, args: argparse.Namespace) -> int:
    print((await operations.delete_model(await operations.resolve(args.agent))).message)
    return EXIT_OK


async def delete_curve(operations, args: argparse.Namespace) -> int:
    print((await operations.delete_returns(await operations.resolve(args.agent))).message)
    return EXIT_OK


async def restart_agent(operations, args: argparse.Namespace) -> int:
    print((await operations.restart(await operations.resolve(args.agent))).message)
    return EXIT_OK


async def delete_agent(operations, args: argparse.Namespace) -> int:
    print((await operations.delete_agent(await operations.resolve(args.agent))).message)
    return EXIT_OK


async def set_lesson(operations, args: argparse.Namespace) -> int:
    print((await operations.set_lesson(await operations.resolve(args.agent), args.name)).message)
    return EXIT_OK


async def set_parameters(operations, args: argparse.Namespace) -> int:
    values = dict(args.values)
    if len(values) != len(args.values):
        raise UsageError("a parameter is given twice")
    print((await operations.set_parameters(await operations.resolve(args.agent), values)).message)
    return EXIT_OK
