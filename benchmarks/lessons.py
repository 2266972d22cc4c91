"""Lessons measured (docs/lessons.md): a curriculum on a sparse maze, and domain randomisation on CartPole.

``maze``: the bundled maze (``Grid-v0``, no action masks: a move into a wall ends the episode with -50; the
only reward better than -50 is reaching the goal, 14 moves away). PPO with lessons that start with the goal 3
moves from the start and move it away along the path (5, 8, 10, then the real goal at 14), each lesson
passed once an evaluation reaches its goal within its shortest path + 6 moves; against the same PPO on the
real goal from the start. Figure: the agent's steps until an evaluation on the real goal returns >= -20 (the
goal reached in <= 20 moves), or "missed" within ``--maze-budget``.

``cartpole``: PPO on CartPole trained ``--cartpole-budget`` steps with one lesson that randomises the pole's
half-length (uniform 0.2-1.0) and the push's force (uniform 5-15) every episode, against the same PPO trained
on CartPole's one setting (0.5, 10). Both are then evaluated greedily on a 3 x 3 grid of the randomised
range (half-lengths 0.2, 0.6, 1.0 x forces 5, 10, 15; ``--eval-episodes`` each). Figure: the mean return
over the grid.

Both drive the agent in-process through the graph with 8 sessions at once (`shepherd.graph.local.drive`, as
the server drives a client's steps), each applying the config announced for its next episode before the
env's reset as `shepherd.client.run_env` does. Per seed, and the medians::

    python benchmarks/lessons.py                        # the measurement: both parts, 5 seeds
    python benchmarks/lessons.py --parts maze --seeds 1  # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shepherd.envs import gridworld  # noqa: E402,F401  registers Grid-v0
from shepherd.graph import AgentSpec, GraphManager, Schedule  # noqa: E402
from shepherd.graph.local import drive, serving_here  # noqa: E402
from shepherd.graph.runtime import AgentRuntime  # noqa: E402
from shepherd.graph.schedule import EvaluationResult  # noqa: E402
from shepherd.lessons import Lesson, Uniform, Until  # noqa: E402
from shepherd.storage import Store  # noqa: E402

#: the maze's goals along its shortest path, each with its distance from the start in moves
GOALS = (((0, 3), 3), ((2, 3), 5), ((2, 0), 8), ((4, 0), 10), ((4, 4), 14))
SLACK = 6  # a lesson is passed when its goal is reached within its shortest path + SLACK moves
MAZE_TARGET = -(14.0 + SLACK)
DRIVERS = 8  # the sessions that train at once (the agent's n_envs: a rollout segment each)
MAZE_PPO = {"n_envs": DRIVERS, "n_steps": 32, "batch_size": 64, "n_epochs": 10, "gamma": 0.99,
            "learning_rate": 0.001, "ent_coef": 0.01, "policy_kwargs": {"net_arch": [32, 32]}}
#: RL Zoo's CartPole PPO (8 envs of 32 steps, without its linear schedules)
CARTPOLE_PPO = {"n_envs": DRIVERS, "n_steps": 32, "batch_size": 256, "n_epochs": 20, "gamma": 0.98,
                "gae_lambda": 0.8, "learning_rate": 0.001, "ent_coef": 0.0, "clip_range": 0.2,
                "policy_kwargs": {"net_arch": [64, 64]}}
LENGTHS, FORCES = (0.2, 1.0), (5.0, 15.0)
GRID = [(length, force) for length in (0.2, 0.6, 1.0) for force in (5.0, 10.0, 15.0)]


def maze_lessons() -> list[Lesson]:
    lessons = [Lesson(f"goal at {distance} moves", {"goal": list(goal)}, until=Until(-(distance + SLACK)))
               for goal, distance in GOALS[:-1]]
    return lessons + [Lesson("the real goal", {"goal": list(GOALS[-1][0])})]


def set_pole(env: gym.Env, config: dict[str, Any]) -> None:
    """CartPole set up with a config: its pole's half-length (and so polemass_length, computed once in its
    constructor) and its push's force."""
    pole: Any = env.unwrapped
    pole.length = float(config["length"])
    pole.polemass_length = pole.masspole * pole.length
    pole.force_mag = float(config["force_mag"])


def ignore_configs(env: gym.Env, config: dict[str, Any]) -> None:
    """The grid's evaluation sets each env up itself: the announced configs are not applied."""


class Served:
    """One agent served in-process on a fresh store; closed with ``async with``."""

    def __init__(self, spec: AgentSpec, schedule: Schedule) -> None:
        self.folder = tempfile.TemporaryDirectory()
        self.graph = GraphManager([spec], owner="bench", schedule=schedule)
        self.store = Store(Path(self.folder.name) / "data")
        self.name = spec.name
        self.key = ""

    async def __aenter__(self) -> "Served":
        self.key = self.graph.create_graph(self.store, serving_here(act_timeout_seconds=120.0))[self.name]
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.graph.end_sessions()
        await asyncio.to_thread(self.graph.close)
        self.store.close()
        self.folder.cleanup()


async def train(served: Served, env_id: str, budget: int, seed: int, stop: asyncio.Event | None = None,
                apply: Any = None) -> None:
    """DRIVERS single-env sessions at once (one per rollout segment of the agent, so that every step is
    learned from), ``budget`` env steps in all, or until ``stop``. Each applies the config announced for
    its next episode before the env's reset (`drive`, as `shepherd.client.run_env` does)."""
    envs = [gym.make(env_id) for _ in range(DRIVERS)]
    await asyncio.gather(*(drive(served.graph, served.key, env, steps=budget // DRIVERS, seed=seed * 100 + index,
                                 stop=stop, apply=apply) for index, env in enumerate(envs)))
    for env in envs:
        env.close()


async def maze_run(seed: int, lessons: bool, budget: int, eval_every: int) -> tuple[int | None, dict[str, int]]:
    """Steps until an evaluation on the real goal reaches the target (None: missed in ``budget``), and the
    steps at which each lesson was first evaluated."""
    spec = AgentSpec("maze", "PPO", [[25], 0.0, 1.0], 4, dict(MAZE_PPO, seed=seed),
                     lessons=maze_lessons() if lessons else ())
    schedule = Schedule(steps_between_evaluation_periods=eval_every, evaluation_episodes=1,
                        checkpoint_every_steps=10 ** 9, checkpoint_every_seconds=10 ** 9)
    reached: list[int] = []
    entered: dict[str, int] = {}
    stop = asyncio.Event()

    def on_evaluation(runtime: AgentRuntime, result: EvaluationResult) -> None:
        if result.lesson is not None:
            entered.setdefault(result.lesson, result.steps)
        if result.final_lesson and result.mean_return >= MAZE_TARGET and not reached:
            reached.append(result.steps)
            stop.set()

    async with Served(spec, schedule) as served:
        served.graph.evaluation_listeners.append(on_evaluation)
        await train(served, "Grid-v0", budget, seed, stop=stop)
    return (reached[0] if reached else None), entered


async def grid_returns(served: Served, episodes: int, seed: int) -> list[float]:
    """The greedy policy's mean return on every setting of the grid."""
    envs = [gym.make("CartPole-v1") for _ in GRID]
    for env, (length, force) in zip(envs, GRID):
        set_pole(env, {"length": length, "force_mag": force})
    returns = await asyncio.gather(*(drive(served.graph, served.key, env, episodes=episodes, evaluate=True,
                                           seed=10_000 * (seed + 1) + index, apply=ignore_configs)
                                     for index, env in enumerate(envs)))
    for env in envs:
        env.close()
    return [float(np.mean(values)) for values in returns]


async def cartpole_run(seed: int, randomised: bool, budget: int, episodes: int) -> list[float]:
    lessons = (Lesson("randomised", {"length": Uniform(*LENGTHS), "force_mag": Uniform(*FORCES)}),) if randomised else ()
    spec = AgentSpec("cartpole", "PPO", [[4], "-inf", "inf"], 2, dict(CARTPOLE_PPO, seed=seed), lessons=lessons)
    schedule = Schedule(checkpoint_every_steps=10 ** 9, checkpoint_every_seconds=10 ** 9)
    async with Served(spec, schedule) as served:
        await train(served, "CartPole-v1", budget, seed, apply=set_pole if randomised else None)
        return await grid_returns(served, episodes, seed)


def steps_text(steps: int | None) -> str:
    return f"{steps:,}" if steps is not None else "missed"


async def maze(args: argparse.Namespace) -> None:
    print(f"maze: steps until an evaluation on the real goal returns >= {MAZE_TARGET:g} "
          f"(budget {args.maze_budget:,} steps, an evaluation every {args.maze_eval_every:,})", flush=True)
    with_lessons: list[int | None] = []
    without: list[int | None] = []
    for seed in args.seed_list:
        started = time.monotonic()
        steps, entered = await maze_run(seed, True, args.maze_budget, args.maze_eval_every)
        plain, _ = await maze_run(seed, False, args.maze_budget, args.maze_eval_every)
        with_lessons.append(steps)
        without.append(plain)
        ratio = (f"{steps / plain:.2f}" if steps is not None and plain is not None else
                 f"< {steps / args.maze_budget:.2f}" if steps is not None else "-")
        progress = ", ".join(f"{name} from {at:,}" for name, at in entered.items())
        print(f"  seed {seed}: with lessons {steps_text(steps)}, without {steps_text(plain)}, ratio {ratio} "
              f"({time.monotonic() - started:.0f} s; lessons evaluated: {progress})", flush=True)
    print(f"  median: with lessons {median_text(with_lessons, args.maze_budget)}, without "
          f"{median_text(without, args.maze_budget)}; reached {sum(s is not None for s in with_lessons)}/"
          f"{len(with_lessons)} with, {sum(s is not None for s in without)}/{len(without)} without", flush=True)


def median_text(steps: list[int | None], budget: int) -> str:
    """The median with a missed run counted as the budget (a lower bound then: marked with '>')."""
    values = [s if s is not None else budget for s in steps]
    median = statistics.median(values)
    missed = 2 * sum(s is None for s in steps) > len(steps)  # the median is a missed run's
    return (">" if missed else "") + f"{median:,.0f}"


async def cartpole(args: argparse.Namespace) -> None:
    print(f"cartpole: mean greedy return over {len(GRID)} settings (half-length x force: "
          f"{', '.join(f'{l:g}x{f:g}' for l, f in GRID)}), {args.eval_episodes} episode(s) each, after "
          f"{args.cartpole_budget:,} training steps", flush=True)
    ratios, randomised_means, fixed_means = [], [], []
    for seed in args.seed_list:
        started = time.monotonic()
        randomised = await cartpole_run(seed, True, args.cartpole_budget, args.eval_episodes)
        fixed = await cartpole_run(seed, False, args.cartpole_budget, args.eval_episodes)
        a, b = float(np.mean(randomised)), float(np.mean(fixed))
        randomised_means.append(a)
        fixed_means.append(b)
        ratios.append(a / max(b, 1e-9))
        print(f"  seed {seed}: randomised {a:.1f} (worst setting {min(randomised):.0f}), single setting {b:.1f} "
              f"(worst {min(fixed):.0f}), ratio {a / max(b, 1e-9):.2f} ({time.monotonic() - started:.0f} s)",
              flush=True)
        print(f"    per setting, randomised: {[round(v) for v in randomised]}; single: {[round(v) for v in fixed]}",
              flush=True)
    print(f"  median: randomised {statistics.median(randomised_means):.1f}, single setting "
          f"{statistics.median(fixed_means):.1f}, ratio {statistics.median(ratios):.2f}; randomised better in "
          f"{sum(r > 1 for r in ratios)}/{len(ratios)} seeds", flush=True)


async def main(args: argparse.Namespace) -> int:
    args.seed_list = list(range(args.first_seed, args.first_seed + args.seeds))
    started = time.monotonic()
    if "maze" in args.parts:
        await maze(args)
    if "cartpole" in args.parts:
        await cartpole(args)
    print(f"total {time.monotonic() - started:.0f} s")
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5, help="seeds per part and condition (default %(default)s)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--parts", nargs="+", default=["maze", "cartpole"], choices=["maze", "cartpole"])
    parser.add_argument("--maze-budget", type=int, default=16_000, help="the most steps of a maze run")
    parser.add_argument("--maze-eval-every", type=int, default=500, help="steps between the maze's evaluations")
    parser.add_argument("--cartpole-budget", type=int, default=12_000, help="training steps of a CartPole run")
    parser.add_argument("--eval-episodes", type=int, default=2, help="greedy episodes per setting of the grid")
    return parser.parse_args(argv)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    sys.exit(asyncio.run(main(parse())))
