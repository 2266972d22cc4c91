"""What a Connect Four agent's greedy policy does with the two tactics the one-move lookahead never misses: how
often it takes a win it has in one move, and how often it blocks the opponent's win in one (when it has none of
its own), over games against a uniform random player; and its share of wins on each side against the random
player and the lookahead (benchmarks/boards.py). It reads an agent's checkpoint, the ``model.zip`` in its folder of
a Shepherd data folder (``DATA/agents/ID/model.zip``; benchmarks/selfplay.py's is a temporary folder, so copy it
while the run goes), and says where self-play's learning falls short: a policy that wins against random
but misses blocks loses to the lookahead.

    python benchmarks/board_tactics.py model.zip --algorithm MaskablePPO --games 200
    python benchmarks/board_tactics.py model.zip --algorithm DQN

Masked greedy actions as the server's: MaskablePPO's masked argmax, DQN's argmax of the allowed Q-values.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import torch as th

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import boards  # noqa: E402
from shepherd.agents import grid_cnn  # noqa: E402,F401  (its class, named in the checkpoint's policy_kwargs)

Player = Callable[[np.ndarray, np.ndarray], int]


def greedy_player(path: str, algorithm: str) -> Player:
    if algorithm == "DQN":
        from stable_baselines3 import DQN

        model = DQN.load(path, device="cpu")

        def dqn(board: np.ndarray, mask: np.ndarray) -> int:
            with th.no_grad():
                q = model.q_net(th.as_tensor(board, dtype=th.float32)[None])[0].numpy()
            return int(np.argmax(np.where(mask.astype(bool), q, -np.inf)))
        return dqn
    from sb3_contrib import MaskablePPO

    ppo = MaskablePPO.load(path, device="cpu")

    def maskable(board: np.ndarray, mask: np.ndarray) -> int:
        action, _ = ppo.predict(board, action_masks=mask.astype(bool), deterministic=True)
        return int(action)
    return maskable


def winning(board: np.ndarray, mask: np.ndarray, channel: int) -> list[int]:
    """The columns where a piece of ``channel`` (0: the mover's) would connect four."""
    found = []
    for column in boards.legal(board, mask):
        after = boards.drop(board, column, channel)
        if after is not None and boards.connects_four(after[:, :, channel]):
            found.append(column)
    return found


def count(tally: dict[str, int], board: np.ndarray, mask: np.ndarray, action: int) -> None:
    """Count the mover's ``action`` on ``board``: a win in one move it had (taken or not), else a win in one the
    opponent had (blocked or not)."""
    wins, threats = winning(board, mask, 0), winning(board, mask, 1)
    if wins:
        tally["wins available"] += 1
        tally["wins taken"] += action in wins
    elif threats:
        tally["blocks needed"] += 1
        tally["blocks made"] += action in threats


def play(agent: Player, opponent: Player, side: int, games: int, seed: int,
         tally: dict[str, int] | None = None) -> list[float]:
    """``games`` games of the agent on ``side`` (0: first) against ``opponent``; the agent's rewards. With
    ``tally``, counts the agent's wins in one move (available, taken) and blocks (needed, made)."""
    from pettingzoo.classic import connect_four_v3

    rewards = []
    for game in range(games):
        env = connect_four_v3.env()
        env.reset(seed=seed + game)
        me = env.possible_agents[side]
        for name in env.agent_iter():
            obs, reward, terminated, truncated, _ = env.last()
            if terminated or truncated:
                if name == me:
                    rewards.append(float(reward))
                env.step(None)
                continue
            board, mask = np.asarray(obs["observation"], dtype=np.int8), np.asarray(obs["action_mask"])
            if name != me:
                env.step(opponent(board, mask))
                continue
            action = agent(board, mask)
            if tally is not None:
                count(tally, board, mask, action)
            env.step(action)
        env.close()
    return rewards


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="an agent's model.zip")
    parser.add_argument("--algorithm", choices=("MaskablePPO", "DQN"), default="MaskablePPO")
    parser.add_argument("--games", type=int, default=200, help="games per opponent and side")
    args = parser.parse_args()
    th.set_num_threads(1)
    agent = greedy_player(args.model, args.algorithm)
    tally = {"wins available": 0, "wins taken": 0, "blocks needed": 0, "blocks made": 0}
    for label, opponent in (("random", boards.uniform), ("lookahead", boards.lookahead)):
        for side in (0, 1):
            rewards = play(agent, opponent, side, args.games, 10_000 * side,
                           tally if label == "random" else None)
            print(f"vs {label:9s} {'first' if side == 0 else 'second'}: won {np.mean([r > 0 for r in rewards]):.0%}, "
                  f"lost {np.mean([r < 0 for r in rewards]):.0%}", flush=True)
    print(f"against random: wins in one move taken {tally['wins taken']} of {tally['wins available']} "
          f"({tally['wins taken'] / max(tally['wins available'], 1):.0%}), the opponent's blocked "
          f"{tally['blocks made']} of {tally['blocks needed']} "
          f"({tally['blocks made'] / max(tally['blocks needed'], 1):.0%})")


if __name__ == "__main__":
    main()
