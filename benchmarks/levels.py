"""Levels (issue 36, docs/levels.md): does choosing between skills pay, on a task where it should?

The task is the bundled corridor with a cue (``shepherd/Corridor-v0``, `shepherd.envs.corridor`): 41 cells, the
agent starts in the middle, a cue says which end pays 1 (the other pays 0), 60 steps at most: a sparse reward
that a random walk rarely earns. The skills are ``left`` and ``right``, PPO agents trained first on their own
start states (``goal="left"``/``"right"``: start anywhere, 1 for reaching that end). Each seed compares, on the
cued task, with evaluations of ``--eval-episodes`` greedy episodes every ``--eval-every`` training steps:

- ``hierarchy``: a PPO selector over the frozen skills (``option_steps`` env steps per choice), served as the
  server serves it (`shepherd.graph.local`, the selector's key, the unchanged protocol);
- ``flat``: a PPO agent on the task, with a budget (``--flat-budget``) at least the hierarchy's with its skills';
- ``random selector``: a programmed selector choosing either skill at random (`random_skill`), evaluated;
- ``best single skill``: each skill alone on the task, evaluated; the better of the two.

It prints the steps to the target (the first evaluation whose mean return reaches ``--target``) for the hierarchy
(its own steps, and with the skills' own training counted) and for the flat agent, per seed and as medians.

    python benchmarks/levels.py                   # 5 seeds, the figures in docs/levels.md
    python benchmarks/levels.py --seeds 1 --budget 5000
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shepherd.envs.corridor import CORRIDOR  # noqa: E402
from shepherd.graph import AgentSpec, GraphManager, Schedule, programmed_selector  # noqa: E402
from shepherd.graph.local import drive, serving_here  # noqa: E402
from shepherd.storage import Store  # noqa: E402

OBS = [[3], -1.0, 1.0]
#: the corridor's cells and step limit: from the middle, a random walk (a step every other action, either way)
#: reaches an end in 90 actions about once in a hundred thousand episodes
LENGTH, MAX_STEPS = 61, 90
PPO = {"n_steps": 256, "batch_size": 64, "n_epochs": 10, "learning_rate": 0.0003, "gamma": 0.99, "ent_coef": 0.01,
       "policy_kwargs": {"net_arch": [32, 32]}}
#: the selector's rollouts are options, a few per episode: shorter rollouts, so it updates as often as the others
SELECTOR = {**PPO, "n_steps": 64, "batch_size": 32}


def preset(seed: int, option_steps: int) -> GraphManager:
    level = {"skills": ["left", "right"], "option_steps": option_steps, "skills_learn": False}
    agents = [AgentSpec("left", "PPO", OBS, 4, {**PPO, "seed": seed}),
              AgentSpec("right", "PPO", OBS, 4, {**PPO, "seed": seed + 1000}),
              AgentSpec("pilot", "PPO", OBS, 2, {**SELECTOR, "seed": seed + 2000}, level=level),
              programmed_selector("random", "shepherd.envs.corridor:random_skill", OBS, level),
              AgentSpec("flat", "PPO", OBS, 4, {**PPO, "seed": seed + 3000})]
    return GraphManager(agents, owner="bench", schedule=Schedule(steps_between_evaluation_periods=10 ** 12,
                                                                 evaluation_episodes=1, checkpoint_every_steps=10 ** 9))


async def evaluate(graph: GraphManager, key: str, goal: str, episodes: int, seed: int) -> float:
    """The mean return of ``episodes`` greedy episodes, half with each cue (a policy that ignores the cue gets at
    most 0.5 on the task)."""
    returns = []
    for cue in (-1.0, 1.0):
        env = gym.make(CORRIDOR, goal=goal, length=LENGTH, max_steps=MAX_STEPS, cue=cue)
        try:
            returns += await drive(graph, key, env, episodes=episodes // 2, evaluate=True, seed=seed)
        finally:
            env.close()
    return float(np.mean(returns))


async def train_until(graph: GraphManager, key: str, goal: str, budget: int, args: argparse.Namespace,
                      seed: int, every: int | None = None) -> tuple[int | None, float]:
    """Train on ``goal``'s corridor in chunks of ``--eval-every`` steps, each followed by an evaluation; returns
    the training steps at the first of ``--in-a-row`` evaluations in a row that reached the target (None: not
    within ``budget``) and the last evaluation. (A greedy policy can solve the task by chance, before it learned
    anything: one evaluation is not enough.)"""
    env = gym.make(CORRIDOR, goal=goal, length=LENGTH, max_steps=MAX_STEPS)
    every = every or args.eval_every
    taken, reached, first = 0, None, True
    try:
        while True:  # an evaluation before any training too: what the greedy policy does by chance
            evaluation = await evaluate(graph, key, goal, args.eval_episodes, 10_000 + taken)
            logging.info("%s on %s: %d steps, evaluation %.2f", key[:6], goal, taken, evaluation)
            reached = (taken if reached is None else reached) if evaluation >= args.target else None
            if reached is not None and taken - reached >= (args.in_a_row - 1) * every:
                return reached, evaluation
            if taken >= budget:
                break
            chunk = min(every, budget - taken)
            await drive(graph, key, env, steps=chunk, seed=seed if first else None)
            taken, first = taken + chunk, False
    finally:
        env.close()
    return None, evaluation


@dataclass
class Result:
    seed: int
    skills: dict[str, int | None]  # each skill's own training steps to its target
    hierarchy: int | None
    flat: int | None
    flat_last: float
    random_selector: float
    best_skill: float
    seconds: float

    @property
    def hierarchy_with_skills(self) -> int | None:
        if self.hierarchy is None or any(steps is None for steps in self.skills.values()):
            return None
        return self.hierarchy + sum(steps for steps in self.skills.values() if steps is not None)


async def one_seed(seed: int, args: argparse.Namespace) -> Result:
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as folder:
        graph = preset(seed, args.option_steps)
        store = Store(Path(folder) / "data")
        keys = graph.create_graph(store, serving_here(act_timeout_seconds=120.0))
        try:
            skills = {}
            for skill in ("left", "right"):
                skills[skill], _ = await train_until(graph, keys[skill], skill, args.skill_budget, args, seed)
            best_skill = max([await evaluate(graph, keys[skill], "cue", args.eval_episodes, 20_000)
                              for skill in ("left", "right")])
            random_selector = await evaluate(graph, keys["random"], "cue", args.eval_episodes, 20_000)
            hierarchy, _ = await train_until(graph, keys["pilot"], "cue", args.budget, args, seed,
                                             args.selector_eval_every)
            flat, flat_last = await train_until(graph, keys["flat"], "cue", args.flat_budget, args, seed)
        finally:
            graph.end_sessions()
            await asyncio.to_thread(graph.close)
            store.close()
    return Result(seed, skills, hierarchy, flat, flat_last, random_selector, best_skill, time.monotonic() - started)


def shown(steps: int | None, budget: int) -> str:
    return f"not in {budget:,}" if steps is None else f"{steps:,}"


def median(values: list[int | None], budget: int) -> str:
    reached = sorted(value for value in values if value is not None)
    missed = len(values) - len(reached)
    if not reached:
        return f"not reached in {budget:,} ({missed}/{len(values)} runs)"
    return (f"{statistics.median(reached):,.0f} (range {reached[0]:,}-{reached[-1]:,}, {len(reached)} runs"
            + (f", {missed} missed" if missed else "") + ")")


def report(results: list[Result], args: argparse.Namespace) -> None:
    print(f"corridor with a cue ({LENGTH} cells, {MAX_STEPS} actions), target {args.target} in {args.in_a_row} "
          f"evaluations in a row (each the mean of {args.eval_episodes} greedy episodes, every {args.eval_every:,} "
          f"steps, the selector's every {args.selector_eval_every:,}), option_steps {args.option_steps}; budgets: "
          f"skills {args.skill_budget:,} each on their own start states, selector {args.budget:,}, flat "
          f"{args.flat_budget:,}")
    print(f"{'seed':>4} {'skills (left, right)':>22} {'hierarchy':>10} {'+ skills':>10} {'flat':>12} "
          f"{'flat last':>9} {'random sel.':>11} {'best skill':>10} {'seconds':>8}")
    for r in results:
        skills = ", ".join(shown(r.skills[name], args.skill_budget) for name in ("left", "right"))
        print(f"{r.seed:>4} {skills:>22} "
              f"{shown(r.hierarchy, args.budget):>10} {shown(r.hierarchy_with_skills, args.budget):>10} "
              f"{shown(r.flat, args.flat_budget):>12} {r.flat_last:>9.2f} {r.random_selector:>11.2f} "
              f"{r.best_skill:>10.2f} {r.seconds:>8.0f}")
    print(f"hierarchy, steps to the target:                 {median([r.hierarchy for r in results], args.budget)}")
    print(f"hierarchy with the skills' training counted:    "
          f"{median([r.hierarchy_with_skills for r in results], args.budget)}")
    print(f"flat agent:                                     {median([r.flat for r in results], args.flat_budget)}")
    print(f"random selector, mean return:                   {statistics.mean(r.random_selector for r in results):.2f}")
    print(f"best single skill, mean return:                 {statistics.mean(r.best_skill for r in results):.2f}")


async def main(args: argparse.Namespace) -> None:
    """The seeds run side by side, each its own graph and data folder on this event loop (their learners' threads
    share the cores), ``--parallel`` at a time."""
    started = time.monotonic()
    results: list[Result] = []
    for first in range(0, args.seeds, args.parallel):
        results += await asyncio.gather(*(one_seed(seed, args)
                                          for seed in range(first, min(args.seeds, first + args.parallel))))
    report(results, args)
    print(f"{time.monotonic() - started:.0f} s in all")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--parallel", type=int, default=5, help="seeds run side by side")
    parser.add_argument("--budget", type=int, default=10_000, help="training steps for the hierarchy's selector")
    parser.add_argument("--flat-budget", type=int, default=16_000,
                        help="training steps for the flat agent: at least the hierarchy's with its skills'")
    parser.add_argument("--skill-budget", type=int, default=16_000, help="training steps for each skill")
    parser.add_argument("--option-steps", type=int, default=10)
    parser.add_argument("--eval-every", type=int, default=1_000, help="training steps between evaluations")
    parser.add_argument("--selector-eval-every", type=int, default=250, help="the same, for the selector")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--in-a-row", type=int, default=2, help="evaluations in a row at the target")
    parser.add_argument("-v", "--verbose", action="store_true")
    arguments = parser.parse_args()
    logging.basicConfig(level=logging.INFO if arguments.verbose else logging.WARNING, format="%(message)s")
    asyncio.run(main(arguments))
