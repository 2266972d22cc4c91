#!/usr/bin/env python
"""What guarding an update costs (issue 48, H1): the copy of every tensor SB3 saves before an update fed by uploads
and the check of the weights after it (`SB3Algorithm.guarded_update`), against the update itself.

    PYTHONPATH=. .venv/bin/python benchmarks/guarded_update.py            # about a minute
    PYTHONPATH=. .venv/bin/python benchmarks/guarded_update.py --rounds 20

For PPO on CartPole (one rollout of 2,048 steps, 10 epochs: an on-policy update guarded once per rollout),
SAC on Pendulum and DQN on CartPole (one gradient step of a 256 batch: an off-policy agent at train_freq 1,
guarded at every step once uploads fed its buffer), with SB3's default networks, in one sitting: the median
over rounds of the update's time, of the guard's (copy and check), and their ratio. One torch thread, as a
learner runs.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch as th
from stable_baselines3 import DQN, PPO, SAC

from shepherd.agents.sb3.base import SB3Algorithm


def measure(model, update, rounds: int) -> tuple[float, float]:
    guard = SB3Algorithm(model, "bench", None, scaled_actions=False)
    updates, guards = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        saved = guard._learning_state()
        assert guard._nonfinite() is None
        guards.append(time.perf_counter() - started)
        started = time.perf_counter()
        update()
        updates.append(time.perf_counter() - started)
        guard._load_learning_state(saved)  # every round updates from the same weights
    return statistics.median(updates), statistics.median(guards)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    th.set_num_threads(1)
    ppo = PPO("MlpPolicy", "CartPole-v1", seed=0, device="cpu")
    ppo.learn(2048)
    sac = SAC("MlpPolicy", "Pendulum-v1", seed=0, device="cpu", learning_starts=300)
    sac.learn(600)
    dqn = DQN("MlpPolicy", "CartPole-v1", seed=0, device="cpu", learning_starts=300)
    dqn.learn(600)
    cases = {"PPO CartPole, one rollout's update": (ppo, ppo.train),
             "SAC Pendulum, one gradient step": (sac, lambda: sac.train(gradient_steps=1, batch_size=256)),
             "DQN CartPole, one gradient step": (dqn, lambda: dqn.train(gradient_steps=1, batch_size=32))}
    print(f"{'case':40} {'update ms':>10} {'guard ms':>10} {'guard/update':>13}")
    for name, (model, update) in cases.items():
        took, guarded = measure(model, update, args.rounds)
        print(f"{name:40} {took * 1e3:10.3f} {guarded * 1e3:10.3f} {guarded / took:13.3f}")


if __name__ == "__main__":
    main()
