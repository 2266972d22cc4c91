"""Advice between clients against pooling and independent learners, on CartPole clients that differ.

Two tasks of 4 clients each: pole half-lengths 0.25, 0.5, 1.0, 1.5 (``lengths``), and two clients of four
with the actions inverted (``inverted``). Three modes: ``pooled`` (one PPO learner for the 4 clients),
``advised`` (a PPO learner per client, advised by the best other client) and ``independent`` (advised
with ``advice_strength`` 0). Each run drives the 4 clients in-process (`shepherd.graph.local`, as the server
drives them), and every ``--eval-every`` steps (summed over clients) evaluates each client on its own env
with greedy sessions; it stops when every client's evaluation reaches 475, or at ``--budget`` steps. It
prints, per task and mode, the steps to the target (median and range over seeds; runs that missed it are
counted). ``--plug`` then adds two clients to the trained advised agent of the first seed, one on client c1's
system and one on the best client's own system, and compares each one's first 10 episodes with the best
client's recent evaluation and with a fresh learner's first 10 on the same system (those 10 begin with its
plug-in trials, one episode per rated client played by that client's greedy policy: printed with them).

    python benchmarks/advice.py --seeds 5 --budget 400000          # the issue's measurement (hours)
    python benchmarks/advice.py --seeds 1 --budget 30000 --tasks lengths --modes advised independent
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

from shepherd.graph import AdvisedAgent, AgentSpec, GraphManager, Schedule, advised  # noqa: E402
from shepherd.graph.local import drive, serving_here  # noqa: E402
from shepherd.storage import Store  # noqa: E402

TARGET = 475.0
LENGTHS = (0.25, 0.5, 1.0, 1.5)
#: RL Zoo's CartPole PPO, one rollout segment per actor
PPO = {"n_steps": 128, "batch_size": 64, "n_epochs": 10, "gamma": 0.98, "gae_lambda": 0.8,
       "learning_rate": 0.001, "ent_coef": 0.0, "clip_range": 0.2, "policy_kwargs": {"net_arch": [64, 64]}}


class InvertedActions(gym.ActionWrapper):
    """A motor wired the other way: action 0 pushes right, 1 pushes left."""

    def action(self, action: int) -> int:
        return 1 - int(action)


def make_env(task: str, index: int) -> gym.Env:
    env = gym.make("CartPole-v1")
    if task == "lengths":
        pole = env.unwrapped
        pole.length = LENGTHS[index]  # type: ignore[attr-defined]
        pole.polemass_length = pole.masspole * pole.length  # type: ignore[attr-defined]  # as CartPoleEnv computes it
        return env
    return InvertedActions(env) if index % 2 else env


def agent(mode: str, seed: int, strength: float, decay: int = 0, learning_rate: float | None = None,
          keep: int = 0) -> AgentSpec:
    parameters = dict(PPO, seed=seed)
    if learning_rate is not None:
        parameters["learning_rate"] = learning_rate
    if mode == "pooled":
        return AgentSpec("cartpole", "PPO", [[4], "-inf", "inf"], 2, {**parameters, "n_envs": 4})
    parameters["advice_strength"] = 0.0 if mode == "independent" else strength
    parameters["advice_decay"] = decay
    parameters["advice_keep"] = keep
    return AgentSpec("cartpole", "PPO", [[4], "-inf", "inf"], 2, parameters, sharing="advised")


@dataclass
class Run:
    task: str
    mode: str
    seed: int
    steps: int | None  # summed over the clients when every evaluation reached the target; None: missed
    evaluations: list[float]
    seconds: float


async def evaluate(graph: GraphManager, key: str, task: str, mode: str, index: int, episodes: int) -> float:
    env = make_env(task, index)
    client = None if mode == "pooled" else f"c{index}"
    returns = await drive(graph, key, env, episodes=episodes, evaluate=True, seed=10_000 + index,
                          client_name=client)
    env.close()
    return float(np.mean(returns))


async def train_until(graph: GraphManager, key: str, task: str, mode: str, budget: int, eval_every: int,
                      episodes: int) -> tuple[int | None, list[float], int]:
    """Drive the 4 clients; returns the steps at which every evaluation reached the target (None: not
    within the budget), the last evaluations, and the steps taken."""
    stop = asyncio.Event()
    envs = [make_env(task, index) for index in range(4)]
    taken = 0
    evaluations = [0.0] * 4
    try:
        while taken < budget:
            chunk = eval_every // 4
            await asyncio.gather(*(drive(graph, key, env, steps=chunk, seed=index if taken == 0 else None,
                                         client_name=None if mode == "pooled" else f"c{index}", stop=stop)
                                   for index, env in enumerate(envs)))
            taken += 4 * chunk
            evaluations = [await evaluate(graph, key, task, mode, index, episodes) for index in range(4)]
            if mode != "pooled":
                graph.preset_agent("cartpole", AdvisedAgent).note_evaluations(
                    {f"c{index}": value for index, value in enumerate(evaluations)})
            logging.info("%s %s: %d steps, evaluations %s", task, mode, taken, [round(v) for v in evaluations])
            if min(evaluations) >= TARGET:
                return taken, evaluations, taken
    finally:
        for env in envs:
            env.close()
    return None, evaluations, taken


async def one_run(task: str, mode: str, seed: int, args: argparse.Namespace, plug: bool = False) -> tuple[Run, dict]:
    with tempfile.TemporaryDirectory() as folder:
        graph = GraphManager([agent(mode, seed, args.strength, args.decay, args.learning_rate, args.keep)], owner="bench",
                             schedule=Schedule(steps_between_evaluation_periods=10 ** 12, evaluation_episodes=1,
                                               checkpoint_every_steps=20_000))
        store = Store(Path(folder) / "data")
        key = graph.create_graph(store, serving_here(act_timeout_seconds=120.0))["cartpole"]
        started = time.monotonic()
        plugged: dict = {}
        try:
            steps, evaluations, _ = await train_until(graph, key, task, mode, args.budget, args.eval_every,
                                                      args.eval_episodes)
            if plug and mode == "advised":
                plugged = await plug_in(graph, key, task, max(evaluations))
        finally:
            graph.end_sessions()
            await asyncio.to_thread(graph.close)
            store.close()
        return Run(task, mode, seed, steps, evaluations, time.monotonic() - started), plugged


async def plug_in(graph: GraphManager, key: str, task: str, best_evaluation: float) -> dict:
    """Plug two new clients into the trained advised agent, each starting from the best client's weights:
    ``late`` on c1's system (a 0.5 pole, or an inverted motor), whatever the best client's system is, and
    ``twin`` on the best client's own system (another arm like the best one). Returns their first 10
    training episodes' mean returns, and how the best client's own greedy policy does on c1's system."""
    best = graph.preset_agent("cartpole", AdvisedAgent).best()  # whose weights the new clients start from
    if best is None:
        raise RuntimeError("no client has an evaluation to be the best")
    best_index = int(best.client.removeprefix("c"))
    env = make_env(task, 1)
    transfer = float(np.mean(await drive(graph, key, env, episodes=3, evaluate=True, seed=778,
                                         client_name=best.client)))
    late = await drive(graph, key, env, episodes=10, seed=777, client_name="late")
    twin = await drive(graph, key, make_env(task, best_index), episodes=10, seed=777, client_name="twin")
    return {"best_recent_evaluation": best_evaluation, "late_first_10": float(np.mean(late)),
            "twin_first_10": float(np.mean(twin)), "started_from": best.client, "best_index": best_index,
            "best_on_new_env": transfer, "late_returns": late, "twin_returns": twin,
            "late_trials": trials_of(graph, "late"), "twin_trials": trials_of(graph, "twin")}


def trials_of(graph: GraphManager, client: str) -> str:
    """What a plugged-in client's plug-in trials returned, by tried client, and whom it adopted."""
    advised = graph.preset_agent("cartpole", AdvisedAgent)
    tried = advised.tried.get(client, {})
    advice = advised.clients[client].learner.algorithm.advice
    adopted = advice.adopt.advisor if advice.adopt is not None else "none"
    return (", ".join(f"{other} {value:.0f}" for other, (_, value) in sorted(tried.items()))
            + f"; adopted {adopted}")


async def fresh_first_10(task: str, seed: int, strength: float, index: int = 1,
                         learning_rate: float | None = None) -> float:
    with tempfile.TemporaryDirectory() as folder:
        graph = GraphManager([agent("independent", seed, strength, learning_rate=learning_rate)], owner="bench", schedule=Schedule(
            steps_between_evaluation_periods=10 ** 12, evaluation_episodes=1))
        store = Store(Path(folder) / "data")
        key = graph.create_graph(store, serving_here())["cartpole"]
        try:
            returns = await drive(graph, key, make_env(task, index), episodes=10, seed=777, client_name="late")
        finally:
            graph.end_sessions()
            await asyncio.to_thread(graph.close)
            store.close()
        return float(np.mean(returns))


def summary(runs: list[Run], budget: int) -> str:
    reached = sorted(r.steps for r in runs if r.steps is not None)
    missed = len(runs) - len(reached)
    if not reached:
        return f"not reached in {budget:,} steps ({missed}/{len(runs)} runs); last evaluations " + \
            "; ".join(str([round(v) for v in r.evaluations]) for r in runs)
    text = f"median {statistics.median(reached):,.0f} steps (range {reached[0]:,}-{reached[-1]:,}, {len(reached)} runs)"
    return text + (f", {missed} missed in {budget:,}" if missed else "")


async def main(args: argparse.Namespace) -> int:
    results: dict[tuple[str, str], list[Run]] = {}
    for task in args.tasks:
        for mode in args.modes:
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                run, plugged = await one_run(task, mode, seed, args, plug=args.plug and seed == args.first_seed)
                results.setdefault((task, mode), []).append(run)
                print(f"{task:9s} {mode:12s} seed {seed}: steps to {TARGET:g} on every client: "
                      f"{run.steps if run.steps is not None else 'not reached'}; last evaluations "
                      f"{[round(v) for v in run.evaluations]} ({run.seconds:.0f} s)", flush=True)
                if plugged:
                    best = plugged["best_recent_evaluation"]
                    fresh = await fresh_first_10(task, seed, args.strength, learning_rate=args.learning_rate)
                    fresh_twin = await fresh_first_10(task, seed, args.strength, plugged["best_index"], args.learning_rate)
                    print(f"{task:9s} plugged-in clients, each starting from client {plugged['started_from']} (the best; "
                          f"recent evaluation {best:.1f}):", flush=True)
                    print(f"{task:9s}   on c1's system: first 10 episodes {plugged['late_first_10']:.1f} (ratio "
                          f"{plugged['late_first_10'] / max(best, 1e-9):.2f}; {plugged['started_from']}'s own greedy "
                          f"policy returns {plugged['best_on_new_env']:.1f} there); a fresh learner's first 10: "
                          f"{fresh:.1f}", flush=True)
                    print(f"{task:9s}     its 10 episodes {[round(v) for v in plugged['late_returns']]}; plug-in "
                          f"trials {plugged['late_trials']}", flush=True)
                    print(f"{task:9s}   on {plugged['started_from']}'s own system: first 10 episodes "
                          f"{plugged['twin_first_10']:.1f} (ratio {plugged['twin_first_10'] / max(best, 1e-9):.2f}, "
                          f"target >= 0.8); a fresh learner's first 10: {fresh_twin:.1f}", flush=True)
                    print(f"{task:9s}     its 10 episodes {[round(v) for v in plugged['twin_returns']]}; plug-in "
                          f"trials {plugged['twin_trials']}", flush=True)
    print("\nsummary (steps summed over the 4 clients):")
    for (task, mode), runs in results.items():
        print(f"  {task:9s} {mode:12s} {summary(runs, args.budget)}")
    for task in args.tasks:
        advised, independent = results.get((task, "advised")), results.get((task, "independent"))
        if advised and independent:
            a = [r.steps for r in advised if r.steps is not None]
            i = [r.steps for r in independent if r.steps is not None]
            if a and i and len(a) == len(advised) and len(i) == len(independent):
                print(f"  {task}: advised / independent median steps = "
                      f"{statistics.median(a) / statistics.median(i):.2f} (target <= 0.6)")
            else:
                print(f"  {task}: advised / independent not comparable (a run missed the target)")
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5, help="seeds per task and mode (default %(default)s)")
    parser.add_argument("--budget", type=int, default=400_000,
                        help="the most steps per run, summed over the 4 clients (default %(default)s)")
    parser.add_argument("--eval-every", type=int, default=8_000,
                        help="steps (summed over clients) between evaluations (default %(default)s)")
    parser.add_argument("--eval-episodes", type=int, default=3, help="greedy episodes per client and evaluation")
    parser.add_argument("--strength", type=float, default=0.3, help="advice_strength of `advised` (default %(default)s)")
    parser.add_argument("--decay", type=int, default=0,
                        help="advice_decay of `advised`: a client's steps until its advice is zero (default 0: never)")
    parser.add_argument("--keep", type=int, default=0,
                        help="advice_keep of `advised`: a client's steps over which a policy it adopted is kept "
                             "(default %(default)s: not kept)")
    parser.add_argument("--trial-episodes", type=int, default=None,
                        help="episodes a trial of an advisor's policy plays (default: shepherd's TRIAL_EPISODES, 1)")
    parser.add_argument("--learning-rate", type=float, default=None,
                        help="PPO's learning rate for every mode (default: RL Zoo's 1e-3, as in PPO above)")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="the seeds run are FIRST_SEED ... FIRST_SEED + SEEDS - 1 (default %(default)s)")
    parser.add_argument("--tasks", nargs="+", default=["lengths", "inverted"], choices=["lengths", "inverted"])
    parser.add_argument("--modes", nargs="+", default=["pooled", "advised", "independent"],
                        choices=["pooled", "advised", "independent"])
    parser.add_argument("--plug", action="store_true",
                        help="after the first advised run of each task, plug in two new clients (on c1's system, "
                             "and on the best client's)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every evaluation")
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse()
    logging.basicConfig(level=logging.INFO if arguments.verbose else logging.WARNING,
                        format="%(asctime)s %(message)s")
    logging.getLogger("shepherd").setLevel(logging.WARNING)
    if arguments.verbose:  # who advises, tries and adopts whom
        logging.getLogger("shepherd.graph.advised").setLevel(logging.INFO)
        logging.getLogger("shepherd.agents.sb3.advised").setLevel(logging.INFO)
    if arguments.trial_episodes is not None:
        advised.TRIAL_EPISODES = arguments.trial_episodes  # read each time a trial is queued
    sys.exit(asyncio.run(main(arguments)))
