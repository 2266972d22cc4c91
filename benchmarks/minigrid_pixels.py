#!/usr/bin/env python
"""Issue 47: MiniGrid from pixels, wall time to a mean return of 0.9: PPO CnnPolicy acting at the client with 8 envs
(`ActingClient`, issue 35) against stable-baselines3's own ``learn()`` on the same 8 envs.

    pip install -e '.[pixels]'
    .venv/bin/python benchmarks/minigrid_pixels.py                      # two rounds; 10-30 minutes on 2 cores
    .venv/bin/python benchmarks/minigrid_pixels.py --rounds 1 --budget 200000

The env: ``MiniGrid-Empty-5x5-v0`` (``--env``) wrapped in ``RGBImgPartialObsWrapper`` + ``ImgObsWrapper``: the
agent's 7x7 view as a 56 x 56 x 3 uint8 image, 7 actions, return ``1 - 0.9 * steps / 100`` on reaching the goal
(0 after 100 steps). Both sides use the same PPO parameters (`PARAMS`: SB3's CnnPolicy, NatureCNN), the same seed
and 8 copies of the env in one synchronous vector env; the learner's torch runs on one thread on both sides
(Shepherd's worker sets it so; SB3's is set here, ``--sb3-threads``). The goal: the mean of the last 100 training
episodes' returns (over the 8 envs, as SB3's ``ep_rew_mean`` counts them) at least 0.9, checked by the same
wrapper at every episode's end on both sides; the clock runs from the first reset (Shepherd: from its login,
the policy file's fetch included; SB3: ``learn()``) to that episode. ``--budget`` env steps at most.

- shepherd: ``run.py -p benchmarks/presets/minigrid_cnn.py`` with ``run_acting_env`` (the client acts with the
  behaviour ONNX file, uploads each block of 8 x 128 steps, the server learns from it);
- sb3: ``PPO("CnnPolicy", DummyVecEnv).learn()`` in this process.

Rounds alternate which side runs first. Prints each run's wall time, env steps, and the ratio shepherd / sb3 of
each round and of the medians, with the load average (``os.getloadavg``) at each run's end.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, Shepherd  # noqa: E402

PRESET = ROOT / "benchmarks" / "presets" / "minigrid_cnn.py"
N_ENVS = 8
#: PPO's parameters on both sides (the preset's, but n_envs and seed)
PARAMS = {"n_steps": 128, "batch_size": 256, "n_epochs": 4, "learning_rate": 2.5e-4, "ent_coef": 0.01,
          "gamma": 0.99, "gae_lambda": 0.95, "clip_range": 0.2}
GOAL, WINDOW = 0.9, 100


class Reached(Exception):
    """The goal was reached: ends a run from inside an env's step."""


class Goal:
    """The returns of every env's finished episodes, the last `WINDOW` kept; raises `Reached` at the goal."""

    def __init__(self, budget: int) -> None:
        self.returns: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self.steps = 0
        self.budget = budget
        self.started = time.perf_counter()
        self.seconds: float | None = None

    def wrapper(self, env: Any) -> Any:
        import gymnasium as gym

        goal = self

        class Watched(gym.Wrapper):
            def reset(self, **kwargs: Any) -> Any:
                self.total = 0.0
                return self.env.reset(**kwargs)

            def step(self, action: Any) -> Any:
                result = self.env.step(action)
                goal.steps += 1
                self.total += float(result[1])
                if result[2] or result[3]:
                    goal.ended(self.total)
                if goal.steps >= goal.budget:
                    raise Reached("budget")
                return result

        return Watched(env)

    def ended(self, total: float) -> None:
        self.returns.append(total)
        if len(self.returns) == WINDOW and statistics.fmean(self.returns) >= GOAL:
            self.seconds = time.perf_counter() - self.started
            raise Reached("goal")


def make_env(env_id: str, goal: Goal) -> Any:
    import gymnasium as gym
    import minigrid  # noqa: F401 - registers the MiniGrid envs
    from minigrid.wrappers import ImgObsWrapper, RGBImgPartialObsWrapper

    return goal.wrapper(ImgObsWrapper(RGBImgPartialObsWrapper(gym.make(env_id))))


def run_shepherd(env_id: str, seed: int, budget: int) -> Goal:
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    from shepherd.client import ActingClient, run_acting_env

    goal = Goal(budget)
    with tempfile.TemporaryDirectory() as folder:
        server = Shepherd(PRESET, Path(folder) / "data", "--rate-limit", "0", "--max-body", str(64 << 20),
                          "--seed", str(seed))
        try:
            envs = SyncVectorEnv([lambda: make_env(env_id, goal)] * N_ENVS, autoreset_mode=AutoresetMode.SAME_STEP)
            client = ActingClient(server.url, server.keys["grid"], n_envs=N_ENVS, timeout=600)
            goal.started = time.perf_counter()
            try:
                run_acting_env(client, envs, seed=seed, steps=budget + 10 * N_ENVS * PARAMS["n_steps"])
            except Reached:
                pass
            envs.close()
        finally:
            server.stop()
    return goal


def run_sb3(env_id: str, seed: int, budget: int, threads: int) -> Goal:
    import torch as th
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    th.set_num_threads(threads)
    goal = Goal(budget)
    venv = DummyVecEnv([lambda: make_env(env_id, goal)] * N_ENVS)
    model = PPO("CnnPolicy", venv, seed=seed, device="cpu", verbose=0, **PARAMS)  # type: ignore[arg-type]
    goal.started = time.perf_counter()
    try:
        model.learn(budget + 10 * N_ENVS * PARAMS["n_steps"])
    except Reached:
        pass
    venv.close()
    return goal


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--env", default="MiniGrid-Empty-5x5-v0")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, alternating the order (default %(default)s)")
    parser.add_argument("--budget", type=int, default=150_000, help="env steps a run at most (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="round r's runs use seed + r (default %(default)s)")
    parser.add_argument("--sb3-threads", type=int, default=1, help="torch threads of SB3's run (default %(default)s)")
    args = parser.parse_args()
    runs: dict[str, list[Goal]] = {"shepherd": [], "sb3": []}
    for round_ in range(args.rounds):
        seed = args.seed + round_
        for name in (["shepherd", "sb3"] if round_ % 2 == 0 else ["sb3", "shepherd"]):
            goal = (run_shepherd(args.env, seed, args.budget) if name == "shepherd"
                    else run_sb3(args.env, seed, args.budget, args.sb3_threads))
            runs[name].append(goal)
            mean = statistics.fmean(goal.returns) if goal.returns else float("nan")
            reached = f"{goal.seconds:.0f} s" if goal.seconds is not None else "not reached"
            print(f"round {round_ + 1} {name:<8}: {reached} to mean {GOAL} ({goal.steps} env steps; last {WINDOW} "
                  f"episodes' mean {mean:.3f}; load {os.getloadavg()[0]:.2f})", flush=True)
        pair = [runs[name][-1].seconds for name in ("shepherd", "sb3")]
        if None not in pair:
            print(f"round {round_ + 1}: shepherd / sb3 = {pair[0] / pair[1]:.2f}x", flush=True)
    done = {name: [goal.seconds for goal in goals if goal.seconds is not None] for name, goals in runs.items()}
    if all(done.values()):
        medians = {name: statistics.median(values) for name, values in done.items()}
        print(f"median wall time to mean {GOAL}: shepherd {medians['shepherd']:.0f} s, sb3 {medians['sb3']:.0f} s, "
              f"shepherd / sb3 = {medians['shepherd'] / medians['sb3']:.2f}x (target <= 1.0x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
