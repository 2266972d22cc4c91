"""Plain stable-baselines3, no Shepherd: DQN with action masks learning tic-tac-toe or Connect Four by self-play,
its greedy policy evaluated as benchmarks/tictactoe_sb3.py evaluates MaskablePPO's (against benchmarks/boards.py's
uniform random player, and minimax or the one-move lookahead; 200 games each, the side drawn each game).

Why it is here: MaskablePPO's self-play misses the tic-tac-toe target (>= 90 % of games not lost against minimax)
at every budget and setting tried (docs/how-to/multi-agent.md), in Shepherd and in plain SB3 alike. This asks
whether a value-based learner does better on the same games. SB3's DQN takes no masks, so this one masks them
itself, with the mask PettingZoo would send read off the board (tic-tac-toe: the empty cells; Connect Four: the
columns not full): the Q-values of illegal actions are set to -1e9 in the online network (acting, greedy) and
in the target network (the target's max runs over the next state's legal actions), and random actions (before
``learning_starts``, and epsilon's) are uniform over the legal ones. Shepherd's DQN takes the masks its clients
send and masks the same three (`shepherd.agents.sb3.value_masks`): ``benchmarks/selfplay.py --algorithm DQN`` is
this learner through a Shepherd server.

Self-play as benchmarks/tictactoe_sb3.py's: the opponent of each game is a frozen copy of the learner's Q-network,
the latest with probability ``--latest``, else one of the last ``--window`` snapshots (one taken every
``--every`` learned steps); it plays its greedy action, or with probability ``--eps-opp`` a uniform legal one.

    python benchmarks/boards_dqn.py --seed 0 --steps 200000                   # tic-tac-toe, vs minimax
    python benchmarks/boards_dqn.py --game connect4 --seed 0 --steps 400000   # vs the one-move lookahead

Needs the ``multiagent`` extra (PettingZoo).
"""

from __future__ import annotations

import argparse
import collections
import copy
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch as th
from stable_baselines3 import DQN
from stable_baselines3.common.vec_env import DummyVecEnv
from stable_baselines3.dqn.policies import DQNPolicy, QNetwork

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import boards  # noqa: E402
from benchmarks.tictactoe_sb3 import AgainstScripted  # noqa: E402

#: what an illegal action's Q-value becomes: never the argmax, and 0 once multiplied by a terminal's (1 - done)
ILLEGAL = -1e9


def legal(obs: th.Tensor) -> th.Tensor:
    """The legal actions of a batch of boards: (batch, 3, 3, 2) -> (batch, 9), the empty cells; (batch, 6, 7, 2)
    -> (batch, 7), the columns whose top cell is empty."""
    filled = obs.sum(dim=-1)
    if obs.shape[1] == boards.ROWS:
        return filled[:, 0, :] == 0
    return filled.reshape(obs.shape[0], -1) == 0


def legal_actions(obs: Any) -> np.ndarray:
    """The legal actions of one board, as indices."""
    return np.flatnonzero(legal(th.as_tensor(np.asarray(obs, dtype=np.float32)[None]))[0].numpy())


class MaskedQNetwork(QNetwork):
    """SB3's Q-network with the illegal actions' values set to `ILLEGAL` (online and target network alike)."""

    def forward(self, obs: th.Tensor) -> th.Tensor:
        q_values = super().forward(obs)
        return th.where(legal(obs), q_values, th.full_like(q_values, ILLEGAL))


class MaskedDQNPolicy(DQNPolicy):
    def make_q_net(self) -> QNetwork:
        net_args = self._update_features_extractor(self.net_args, features_extractor=None)
        return MaskedQNetwork(**net_args).to(self.device)


class MaskedDQN(DQN):
    """DQN whose random actions (epsilon's, and before ``learning_starts``) are uniform over the legal ones."""

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = False) -> tuple[Any, Any]:
        if not deterministic and np.random.rand() < self.exploration_rate:
            return self._random_legal(observation), state
        return self.policy.predict(observation, state, episode_start, deterministic)

    def _random_legal(self, observation: Any) -> Any:
        obs = np.asarray(observation)
        if obs.ndim == 3:
            return np.int64(np.random.choice(legal_actions(obs)))
        return np.array([np.random.choice(legal_actions(board)) for board in obs])

    def _sample_action(self, learning_starts: int, action_noise: Any = None, n_envs: int = 1) -> tuple[Any, Any]:
        if self.num_timesteps < learning_starts:
            action = self._random_legal(self._last_obs)
        else:
            action, _ = self.predict(self._last_obs, deterministic=False)
        return action, action


class Ghost:
    """The self-play's opponents, shared by the envs: snapshots of the learner's Q-network (the last ``window``,
    one every ``every`` learned steps, taken when a game begins) and each game's opponent."""

    def __init__(self, window: int, every: int, latest: float, epsilon: float, seed: int) -> None:
        self.every, self.latest, self.epsilon = every, latest, epsilon
        self.rng = random.Random(seed)
        self.pool: collections.deque[dict[str, th.Tensor]] = collections.deque(maxlen=window)
        self.model: Any = None  # the learner, once it exists
        self.steps = self.taken = 0

    def opponent(self, frozen: th.nn.Module) -> Callable[[Any, Any], int]:
        """A new game's opponent, loaded into ``frozen`` (a copy of the learner's Q-network, one per env)."""
        if not self.pool or self.steps - self.taken >= self.every:
            self.pool.append({name: tensor.detach().clone() for name, tensor in self.model.q_net.state_dict().items()})
            self.taken = self.steps
        frozen.load_state_dict(self.model.q_net.state_dict() if self.rng.random() < self.latest
                               else self.rng.choice(list(self.pool)))

        def act(obs: Any, mask: Any) -> int:
            if self.rng.random() < self.epsilon:
                return self.rng.choice([int(a) for a in np.flatnonzero(mask)])
            with th.no_grad():
                return int(frozen(th.as_tensor(np.asarray(obs, np.float32)[None])).argmax(dim=1)[0])

        return act


class AgainstSelf(AgainstScripted):
    """A board game from one side against a frozen copy of the learner (`Ghost`), drawn each game."""

    def __init__(self, ghost: Ghost, seed: int, game: str) -> None:
        super().__init__(boards.uniform, seed, game)
        self.ghost = ghost
        self.frozen: Any = None

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        if self.frozen is None:
            self.frozen = copy.deepcopy(self.ghost.model.q_net)
        self.opponent = self.ghost.opponent(self.frozen)
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.ghost.steps += 1
        return super().step(action)


def scores(model: Any, opponent: Callable[[Any, Any], int], games: int, seed: int, game: str) -> tuple[float, float]:
    """(share won, share not lost) of the greedy policy over ``games`` games."""
    env, results = AgainstScripted(opponent, seed, game), []
    for _ in range(games):
        obs, _ = env.reset()
        ended, reward = False, 0.0
        while not ended:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, ended, _, _ = env.step(action)
        results.append(reward)
    return sum(r > 0 for r in results) / games, sum(r >= 0 for r in results) / games


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", choices=("tictactoe", "connect4"), default="tictactoe")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--evaluations", type=int, default=8, help="evaluations along the run, evenly spaced")
    parser.add_argument("--games", type=int, default=200, help="evaluation games per opponent")
    parser.add_argument("--envs", type=int, default=2)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--every", type=int, default=2000, help="learned steps between two snapshots")
    parser.add_argument("--latest", type=float, default=0.5, help="the share of games against the latest policy")
    parser.add_argument("--eps-opp", type=float, default=0.1, help="the opponents' share of uniform legal moves")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--target-update", type=int, default=1000)
    parser.add_argument("--exploration-fraction", type=float, default=0.3)
    parser.add_argument("--final-eps", type=float, default=0.05)
    parser.add_argument("--buffer", type=int, default=200_000)
    args = parser.parse_args()
    th.set_num_threads(1)
    ghost = Ghost(args.window, args.every, args.latest, args.eps_opp, args.seed)
    venv = DummyVecEnv([lambda index=index: AgainstSelf(ghost, args.seed * 100 + index, args.game)
                        for index in range(args.envs)])
    model = MaskedDQN(MaskedDQNPolicy, venv, seed=args.seed, learning_rate=args.learning_rate,
                      buffer_size=args.buffer, learning_starts=2000, batch_size=128, gamma=args.gamma, train_freq=1,
                      gradient_steps=1, target_update_interval=args.target_update,
                      exploration_fraction=args.exploration_fraction, exploration_final_eps=args.final_eps,
                      policy_kwargs={"net_arch": [256, 256]}, verbose=0)
    ghost.model = model
    print(f"seed {args.seed}: {vars(args)}", flush=True)
    started = time.perf_counter()
    for index in range(args.evaluations):
        model.learn(args.steps // args.evaluations, reset_num_timesteps=False)
        won, _ = scores(model, boards.uniform, args.games, 12345 + index, args.game)
        if args.game == "tictactoe":
            _, kept = scores(model, boards.minimax, args.games, 54321 + index, args.game)
            against = f"vs minimax not lost {kept:.0%}"
        else:
            beaten, _ = scores(model, boards.lookahead, args.games, 54321 + index, args.game)
            against = f"vs lookahead won {beaten:.0%}"
        print(f"seed {args.seed}: {model.num_timesteps:7d} steps ({time.perf_counter() - started:.0f} s): "
              f"vs random won {won:.0%}, {against}", flush=True)


if __name__ == "__main__":
    main()
