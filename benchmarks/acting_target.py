#!/usr/bin/env python
"""Time to the target: ``run.py -p cartpole_ppo --clients 1 --envs-per-client 8 --acting client`` until it
exits at an evaluation return of 475, against SB3's ``learn()`` with the same hyperparameters and 8 envs
until its evaluation returns 475 (issue 35's last figure: <= 1.0x, median of >= 4 rounds).

    .venv/bin/python benchmarks/acting_target.py --rounds 4     # ~10 min here

Both sides are whole processes timed from start to exit (imports and the server's start included on
Shepherd's side, which a user waits for too), round k seeded k on both sides, their order alternating from
round to round. SB3 evaluates as the preset's schedule does: every 5,000 env steps, 5 greedy episodes of
CartPole-v1 on an env of its own (`EvalCallback`, ``deterministic=True``), stopping at a mean of 475
(`StopTrainingOnRewardThreshold`), one torch thread as Shepherd's learner. Prints one JSON object and the
median ratio (Shepherd's wall time / SB3's: at most 1.0 meets the target).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SB3_TO_TARGET = """
import json, sys
sys.path.insert(0, {root!r})
import torch as th
th.set_num_threads(1)
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold
from stable_baselines3.common.env_util import make_vec_env
from shepherd.agents import sb3_arguments
from shepherd.graph import GraphManager
from shepherd.loading.presets import load_preset
from shepherd.wire.spaces import parse_space

graph = GraphManager.of(load_preset("cartpole_ppo"))  # the hyperparameters Shepherd serves
spec, schedule = graph.agents[0], graph.schedule
kwargs, n_envs = sb3_arguments(spec.algorithm, parse_space(spec.action_space), dict(spec.parameters))
model = PPO("MlpPolicy", make_vec_env("CartPole-v1", n_envs=n_envs, seed={seed}), seed={seed}, **kwargs)
stop = StopTrainingOnRewardThreshold(reward_threshold=graph.validation.target_return, verbose=0)
evaluate = EvalCallback(make_vec_env("CartPole-v1", n_envs=1, seed={seed} + 1000), callback_on_new_best=stop,
                        n_eval_episodes=schedule.evaluation_episodes, deterministic=True, verbose=0,
                        eval_freq=max(1, schedule.steps_between_evaluation_periods // n_envs))
model.learn(graph.validation.max_steps, callback=evaluate)
print(json.dumps({{"steps": int(model.num_timesteps), "best": float(evaluate.best_mean_reward)}}))
"""


def shepherd_side(seed: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="shepherd-target-") as data:
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "run.py", "-p", "cartpole_ppo", "--clients", "1", "--envs-per-client", "8",
             "--acting", "client", "--seed", str(seed), "--data", data, "--quiet"],
            cwd=ROOT, capture_output=True, text=True, timeout=1800)
        wall = time.monotonic() - started
    reached = re.search(r"target reached: evaluation \d+ at (\d+) steps returned ([\d.]+)",
                        result.stdout + result.stderr)
    return {"wall_s": wall, "exit": result.returncode, "reached": bool(reached),
            "steps": int(reached.group(1)) if reached else None}


def sb3_side(seed: int) -> dict:
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", SB3_TO_TARGET.format(root=str(ROOT), seed=seed)],
                            capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - started
    if result.returncode:
        raise RuntimeError(result.stderr[-2000:])
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    return {"wall_s": wall, "reached": figures["best"] >= 475.0, **figures}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--rounds", type=int, default=4, help="rounds, each seeded by its index (default %(default)s)")
    args = parser.parse_args()
    runs = []
    for index in range(args.rounds):
        sides = [("shepherd", shepherd_side), ("sb3", sb3_side)]
        run = {}
        for name, side in sides if index % 2 == 0 else reversed(sides):
            print(f"  round {index + 1}: {name} ...", file=sys.stderr, flush=True)
            run[name] = side(index)
        runs.append(run)
    print(json.dumps(runs, indent=1))
    ratios = sorted(run["shepherd"]["wall_s"] / run["sb3"]["wall_s"] for run in runs)
    middle = len(ratios) // 2
    median = ratios[middle] if len(ratios) % 2 else (ratios[middle - 1] + ratios[middle]) / 2
    for index, run in enumerate(runs):
        print(f"round {index + 1} (seed {index}): Shepherd {run['shepherd']['wall_s']:.1f} s "
              f"({run['shepherd']['steps']} steps, exit {run['shepherd']['exit']}), SB3 {run['sb3']['wall_s']:.1f} s "
              f"({run['sb3']['steps']} steps, reached {run['sb3']['reached']})")
    print(f"time to 475, Shepherd / SB3 wall: median {median:.2f}x (rounds {', '.join(f'{r:.2f}' for r in ratios)}); "
          "target <= 1.0x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
