"""The preset side of ``python run.py``: ``-l`` (list the presets, Python and YAML), the options that change a
preset as it loads (``-cp KEY=VALUE``, ``--seed N``), and ``run.py check PRESET`` (load and check a preset,
serving nothing and touching no data folder)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shepherd.arguments import data_folder, seed
from shepherd.cli.common import EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:
    from shepherd.graph import GraphManager

CP_HELP = ("change one key of the preset as it loads; repeat it for more, applied in order. KEY is a dotted path: "
           "owner, agents.NAME.FIELD (algorithm, observation_space, action_space, sharing, name), "
           "agents.NAME.parameters.PARAMETER, schedule.FIELD, validation.FIELD (validation.env_kwargs.KEY); "
           "VALUE is read as YAML (0.0003, true, null, lin_0.001, [64, 64]) and checked like the preset's own "
           "values. An unknown key or a bad value stops the start with exit status 2, listing what it could be. "
           "Example: -cp agents.cartpole.parameters.learning_rate=0.0003 -cp schedule.evaluation_episodes=10")
SEED_HELP = ("seed the learners and the local clients: sets every learning agent's seed parameter to N (unless a -cp sets "
             "it) and seeds the envs of --clients from N (client k's first env from N + k x M); one agent fed by "
             "one client (of one env or one vector env) then learns the same from run to run, several clients "
             "do not (the order in which their steps reach the learner depends on timing)")


def add_preset_options(parser: argparse.ArgumentParser, dest_prefix: str = "") -> None:
    """``-cp KEY=VALUE`` (repeatable) and ``--seed N``, stored as ``{prefix}overrides`` and ``{prefix}seed``."""
    parser.add_argument("-cp", "--custom-parameter", dest=f"{dest_prefix}overrides", action="append", default=None,
                        metavar="KEY=VALUE", help=CP_HELP)
    parser.add_argument("--seed", dest=f"{dest_prefix}seed", type=seed, default=None, metavar="N", help=SEED_HELP)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "check", help="load and check a preset (Python or YAML) without serving it",
        description="Load a preset as `run.py -p PRESET` would (with its -cp and --seed), check it, and build "
                    "each agent's learner (stable-baselines3 refuses some combinations that the types allow), "
                    "without serving anything or touching a data folder (--data DIR reads one, to check the skills a "
                    "selector names that the preset does not declare). Exit status 0 with a summary (agents, "
                    "algorithms, spaces, parameters, schedule, validation); 2 with every problem found, one a "
                    "line, each naming its key (agents[0].parameters.gamma) and where it came from (the file or "
                    "the -cp).")
    parser.add_argument("preset", metavar="PRESET", help="a name from -l, a path to a .py, .yaml or .yml file, or "
                                                         "zoo:ALGO/ENV_ID or zoo:FILE.yml#ENV_ID")
    add_preset_options(parser, "check_")
    parser.add_argument("--data", dest="check_data", type=data_folder, default=None, metavar="DIR",
                        help="also check the skills a selector names that the preset does not declare against the "
                             "agents of the preset's owner in this data folder (read only; a server may serve it). "
                             "Without it such skills are checked when the preset is served")
    parser.set_defaults(func=check_command)


def list_presets_command() -> int:
    """``run.py -l``: every preset, its kind (python or yaml) and its description's first line."""
    from shepherd.loading.presets import preset_entries

    entries = preset_entries()
    width = max((len(entry.name) for entry in entries), default=0)
    for entry in entries:
        print(f"{entry.name:<{width}}  {entry.kind:<6}  {entry.description}")
    print("\nrun.py -p NAME serves one (python: presets/NAME.py, yaml: presets/NAME.yaml); run.py check NAME "
          "checks it.")
    from shepherd.loading.zoo import zoo_folder

    installed = "installed" if zoo_folder() is not None else "not installed: zoo:FILE.yml#ENV_ID only"
    print(f"RL Zoo's hyperparameters: -p zoo:ALGO/ENV_ID (rl_zoo3 {installed}), or -p zoo:FILE.yml#ENV_ID.")
    return EXIT_OK


def check_command(args: argparse.Namespace) -> int:
    from shepherd.graph import GraphManager, PresetError
    from shepherd.graph.preset import InvalidPreset
    from shepherd.loading.presets import load_preset, preset_path, shown_path

    overrides = [*(getattr(args, "overrides", None) or []), *(args.check_overrides or [])]
    seed = args.check_seed if args.check_seed is not None else getattr(args, "seed", None)
    zoo = args.preset.startswith("zoo:")  # RL Zoo's hyperparameters (shepherd.loading.zoo)
    shown = args.preset
    try:
        if zoo:
            from shepherd.loading.zoo import zoo_source

            shown = zoo_source(args.preset).shown
        else:
            shown = shown_path(preset_path(args.preset))
        graph = GraphManager.of(load_preset(args.preset, overrides=overrides, seed=seed, bounds=args.bounds))
        if args.check_data is not None and graph.preset.folder_skills():
            graph.preset.check_skills(stored_definitions(args.check_data, graph.owner))
        if args.check_data is not None and graph.preset.environments:
            graph.preset.check_environments(stored_definitions(args.check_data, graph.owner))
        problems = graph.build_problems()
        if problems:
            raise InvalidPreset(problems).located(shown)
    except InvalidPreset as error:
        located = error.located(shown)
        count = len(located.problems)
        print(f"preset {shown}: {count} problem{'s' if count != 1 else ''}", file=sys.stderr)
        for problem in located.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_USAGE
    except PresetError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    kind = "zoo" if zoo else "python" if shown.endswith(".py") else "yaml"
    print(f"preset {graph.name} ({kind}, {shown}): ok" + (f" - {graph.description}" if graph.description
                                                          else ""))
    for line in summary(graph, args.check_data):
        print(line)
    return EXIT_OK


def stored_definitions(folder: Path, owner: str) -> dict[str, Any]:
    """The agents of ``owner`` in the data folder ``folder``, by name (read without opening its store).

    Raises:
        PresetError: the folder is no data folder.
    """
    from shepherd.graph import PresetError
    from shepherd.storage import StoreError
    from shepherd.storage.peek import read_agents

    try:
        return {agent.record.name: agent.record.definition for agent in read_agents(folder) if agent.owner == owner}
    except StoreError as error:
        raise PresetError(f"--data {folder}: {error}") from None


def summary(graph: GraphManager, data: Path | None = None) -> list[str]:
    """A checked preset in a few lines: owner, agents (algorithm, spaces, sharing, parameters), schedule,
    validation."""
    from shepherd.cli.progress import describe_schedule

    lines = [f"  owner: {graph.owner}"]
    for spec in graph.agents:
        lines.append(f"  agent {spec.name}: {spec.algorithm}, observations {json.dumps(spec.observation_space)}, "
                     f"actions {json.dumps(spec.action_space)}, sharing {spec.sharing.value}")
        if spec.parameters:
            lines.append("    parameters: " + ", ".join(f"{name}={json.dumps(value)}"
                                                       for name, value in spec.parameters.items()))
        if spec.filters.active:
            lines.append("    filters: " + ", ".join(f"{name}={json.dumps(value)}"
                                                    for name, value in spec.filters.to_json().items()))
        if spec.level is not None:  # a selector (docs/levels.md)
            level = spec.level
            lines.append(f"    level: skills {', '.join(level.skills)}, at most {level.option_steps} steps per option, "
                         f"skills {'learn' if level.skills_learn else 'frozen'}")
            stored = [name for name in level.skills if name in graph.preset.folder_skills()]
            if stored:
                lines.append(f"    skills of the data folder (not in the preset): {', '.join(stored)}; "
                             + (f"checked in {data}" if data is not None else "not checked here (give --data DIR), "
                                "checked when the preset is served"))
    for environment in graph.preset.environments:  # docs/how-to/multi-agent.md
        roles = ", ".join(f"{role}: {player}" for role, player in environment.roles.items())
        lines.append(f"  environment {environment.name}: roles {roles}; turns {environment.turns}")
        if environment.teams:
            lines.append("    teams: " + "; ".join(f"{team}: {', '.join(roles)}"
                                                 for team, roles in environment.teams.items()))
        if environment.self_play is not None:
            play = environment.self_play
            lines.append(f"    self-play: a snapshot every {play.snapshot_every:,} steps, window {play.window}, "
                         f"against the latest {play.against_latest:g}, swap every {play.swap_every:,} steps, "
                         f"opponents' actions {'sampled' if play.opponent_actions == 'sample' else 'greedy'}"
                         + (f", scripted opponents {', '.join(play.opponents)}" if play.opponents else ""))
        unseen = [player for player in environment.agents() if player not in {spec.name for spec in graph.agents}]
        if unseen:
            lines.append(f"    agents of the data folder (not in the preset): {', '.join(unseen)}; "
                         + (f"checked in {data}" if data is not None else "not checked here (give --data DIR), "
                            "checked when the preset is served"))
    schedule = graph.schedule
    lines.append(f"  schedule: {describe_schedule(schedule)}; checkpoint every {schedule.checkpoint_every_steps:,} "
                 f"steps or {schedule.checkpoint_every_seconds:g} s")
    validation = graph.validation
    if validation is None:
        lines.append("  validation: none (--clients cannot run it)")
    else:
        agent = validation.agent or graph.agents[0].name
        kwargs = f" {json.dumps(validation.env_kwargs)}" if validation.env_kwargs else ""
        lines.append(f"  validation: {validation.env_id}{kwargs}, {validation.clients} client(s) driving agent "
                     f"{agent}, target return {validation.target_return:g} within {validation.max_steps:,} steps "
                     f"(gives up after {validation.timeout_seconds:g} s)")
        if any(spec.name == agent and spec.sharing.value == "advised" for spec in graph.agents):
            lines.append(f"    agent {agent} is advised: the local clients (run.py -p --clients N) log in as clients "
                         "local-0 ... local-N-1, and the target is reached when every client's last evaluation "
                         "reaches it")
    return lines
