"""Plain stable-baselines3, no Shepherd: MaskablePPO with benchmarks/selfplay.py's tic-tac-toe hyperparameters
trained by its own ``learn()`` against a fixed scripted player (no self-play), its greedy policy evaluated after
each quarter of the budget against the uniform random player and minimax (benchmarks/boards.py), the agent's side
drawn at random each game. The reference for ``selfplay.py --game tictactoe --train-against random``: the same
agent and opponent through a Shepherd server.

    python benchmarks/tictactoe_sb3.py --seed 0 --steps 60000

Needs the ``multiagent`` extra (PettingZoo).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import numpy as np
from pettingzoo.classic import tictactoe_v3
from sb3_contrib import MaskablePPO
from sb3_contrib.common.wrappers import ActionMasker
from stable_baselines3.common.vec_env import DummyVecEnv

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import boards  # noqa: E402

#: benchmarks/selfplay.py's tic-tac-toe parameters (its PPO with n_steps 256, batch 128)
PARAMETERS = {"learning_rate": 3e-4, "n_steps": 256, "batch_size": 128, "n_epochs": 4, "gamma": 0.99,
              "gae_lambda": 0.95, "ent_coef": 0.01, "policy_kwargs": {"net_arch": [256, 256]}}


class AgainstScripted(gym.Env):
    """Tic-tac-toe from one player's side against ``opponent(obs, mask) -> action``; the side drawn each game."""

    observation_space = gym.spaces.Box(0, 1, (3, 3, 2), np.float32)
    action_space = gym.spaces.Discrete(9)

    def __init__(self, opponent: Callable[[Any, Any], int], seed: int) -> None:
        self.env, self.opponent, self.rng = tictactoe_v3.env(), opponent, random.Random(seed)
        self.seat: str | None = None
        self.mask = np.ones(9, dtype=bool)

    def _advance(self) -> tuple[Any, float, bool]:
        """The opponent plays until it is the agent's turn or the game ended: (obs, the agent's reward, ended)."""
        while True:
            agent = self.env.agent_selection
            obs, reward, terminated, truncated, _ = self.env.last()
            if terminated or truncated:
                if agent == self.seat:
                    return obs, float(reward), True
                self.env.step(None)
                continue
            if agent == self.seat:
                return obs, 0.0, False
            self.env.step(self.opponent(obs["observation"], obs["action_mask"]))

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        self.env.reset(seed=self.rng.randrange(1 << 30))
        self.seat = self.rng.choice(self.env.agents)
        obs, _, _ = self._advance()
        self.mask = obs["action_mask"].astype(bool)
        return obs["observation"].astype(np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.env.step(int(action))
        obs, reward, ended = self._advance()
        self.mask = obs["action_mask"].astype(bool)
        return obs["observation"].astype(np.float32), reward, ended, False, {}

    def action_masks(self) -> np.ndarray:
        return self.mask


def scores(model: Any, opponent: Callable[[Any, Any], int], games: int, seed: int) -> tuple[float, float]:
    """(share won, share not lost) of the greedy policy over ``games`` games."""
    env, results = AgainstScripted(opponent, seed), []
    for _ in range(games):
        obs, _ = env.reset()
        ended, reward = False, 0.0
        while not ended:
            action, _ = model.predict(obs, deterministic=True, action_masks=env.action_masks())
            obs, reward, ended, _, _ = env.step(action)
        results.append(reward)
    return sum(r > 0 for r in results) / games, sum(r >= 0 for r in results) / games


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=60_000)
    parser.add_argument("--games", type=int, default=200, help="evaluation games per opponent")
    parser.add_argument("--envs", type=int, default=2, help="envs of the VecEnv (selfplay.py's --sessions)")
    args = parser.parse_args()
    venv = DummyVecEnv([lambda index=index: ActionMasker(AgainstScripted(boards.uniform, args.seed * 100 + index),
                                                         lambda env: env.action_masks())
                        for index in range(args.envs)])
    model = MaskablePPO("MlpPolicy", venv, seed=args.seed, verbose=0, **PARAMETERS)
    started = time.perf_counter()
    for quarter in range(4):
        model.learn(args.steps // 4, reset_num_timesteps=False)
        won, _ = scores(model, boards.uniform, args.games, 12345 + quarter)
        _, kept = scores(model, boards.minimax, args.games, 54321 + quarter)
        print(f"seed {args.seed}: {model.num_timesteps:6d} steps ({time.perf_counter() - started:.0f} s): "
              f"vs random won {won:.0%}, vs minimax not lost {kept:.0%}", flush=True)


if __name__ == "__main__":
    main()
