"""Plain stable-baselines3, no Shepherd: MaskablePPO with benchmarks/selfplay.py's tic-tac-toe hyperparameters
trained by its own ``learn()`` against a fixed scripted player (no self-play) or against itself (``--self-play``),
its greedy policy evaluated ``--evaluations`` times along the budget (4: each quarter) against the uniform random
player and minimax (benchmarks/boards.py), the agent's side drawn at random each game. The reference for ``selfplay.py --game
tictactoe --train-against random`` and for ``selfplay.py --game tictactoe``: the same agent and opponent through
a Shepherd server.

``--self-play`` is Shepherd's ``self_play`` (ML-Agents' ghost) without Shepherd: the opponent of each game is a
frozen copy of the learner's policy drawn when the game begins, the latest policy with probability
``against_latest``, else one of the last ``window`` snapshots, a snapshot taken every ``snapshot_every`` learned
steps (and one at the start); the opponent samples its actions under the mask (``opponent_actions: sample``) and
its moves are not learned from. The agent's side is drawn each game, or, with ``--set swap_every=N``, swapped
every N learned steps as Shepherd's is.

    python benchmarks/tictactoe_sb3.py --seed 0 --steps 60000
    python benchmarks/tictactoe_sb3.py --seed 0 --steps 60000 --self-play
    python benchmarks/tictactoe_sb3.py --seed 0 --self-play --set gamma=1.0 --set n_epochs=10
    python benchmarks/tictactoe_sb3.py --seed 0 --self-play --set window=200 --set against_latest=0.1
    python benchmarks/tictactoe_sb3.py --seed 0 --steps 80000 --against minimax   # no self-play: vs minimax
    python benchmarks/tictactoe_sb3.py --game connect4 --seed 0 --self-play   # Connect Four (vs the lookahead)
    python benchmarks/tictactoe_sb3.py --game connect4 --seed 0 --self-play --steps 1000000 --envs 4 \
        --evaluations 10 --games 100 --threads 1 --set features=cnn   # the board through a CNN (BoardCNN)

``--openings K`` begins each training game with 0 .. K uniform random moves (the evaluations never).

Needs the ``multiagent`` extra (PettingZoo).
"""

from __future__ import annotations

import argparse
import collections
import copy
import importlib
import json
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch as th

import gymnasium as gym
import numpy as np
from pettingzoo.classic import connect_four_v3, tictactoe_v3
from sb3_contrib import MaskablePPO
from sb3_contrib.common.wrappers import ActionMasker
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.vec_env import DummyVecEnv

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import boards  # noqa: E402

_PPO = {"learning_rate": 3e-4, "n_steps": 512, "batch_size": 256, "n_epochs": 4, "gamma": 0.99,
        "gae_lambda": 0.95, "ent_coef": 0.01, "policy_kwargs": {"net_arch": [256, 256]}}
#: benchmarks/selfplay.py's parameters per game (tic-tac-toe: its PPO with n_steps 256, batch 128)
PARAMETERS = {"connect4": _PPO, "tictactoe": {**_PPO, "n_steps": 256, "batch_size": 128}}

_SELF_PLAY = {"snapshot_every": 5000, "window": 10, "against_latest": 0.5, "opponent_actions": "sample",
              "opponents": [], "swap_every": 0}
#: benchmarks/selfplay.py's ``self_play`` settings per game (``swap_every`` 0: the side is drawn each game)
SELF_PLAY = {"connect4": _SELF_PLAY, "tictactoe": {**_SELF_PLAY, "snapshot_every": 2000}}


#: the games: PettingZoo's env, its observation's shape, its actions (``--game``)
BOARDS = {"tictactoe": (tictactoe_v3.env, (3, 3, 2), 9), "connect4": (connect_four_v3.env, (6, 7, 2), 7)}


class BoardCNN(BaseFeaturesExtractor):
    """A board seen as a board (``--set features=cnn``): PettingZoo's rows x columns x 2 planes through three 3 x 3
    convolutions of ``channels`` filters (padded, so each keeps the board's size), then one linear layer."""

    def __init__(self, observation_space: gym.spaces.Box, channels: int = 64, features_dim: int = 256) -> None:
        super().__init__(observation_space, features_dim)
        rows, columns, planes = observation_space.shape
        self.net = th.nn.Sequential(
            th.nn.Conv2d(planes, channels, 3, padding=1), th.nn.ReLU(),
            th.nn.Conv2d(channels, channels, 3, padding=1), th.nn.ReLU(),
            th.nn.Conv2d(channels, channels, 3, padding=1), th.nn.ReLU(),
            th.nn.Flatten(), th.nn.Linear(channels * rows * columns, features_dim), th.nn.ReLU())

    def forward(self, observations: th.Tensor) -> th.Tensor:
        return self.net(observations.permute(0, 3, 1, 2))


class AgainstScripted(gym.Env):
    """A board game from one player's side against ``opponent(obs, mask) -> action``; the side drawn each game."""

    def __init__(self, opponent: Callable[[Any, Any], int], seed: int, game: str = "tictactoe") -> None:
        factory, shape, actions = BOARDS[game]
        self.observation_space = gym.spaces.Box(0, 1, shape, np.float32)
        self.action_space = gym.spaces.Discrete(actions)
        self.env, self.opponent, self.rng, self.game = factory(), opponent, random.Random(seed), game
        self.seat: str | None = None
        self.mask = np.ones(actions, dtype=bool)
        self.openings = 0  # training games' random opening moves (``--openings``)

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

    def _open(self) -> None:
        """A new game, after ``openings`` (0 .. that many, uniformly) uniform random moves of either side."""
        self.env.reset(seed=self.rng.randrange(1 << 30))
        for _ in range(self.rng.randint(0, self.openings)):
            _, _, terminated, truncated, _ = self.env.last()
            if terminated or truncated:
                break
            mask = self.env.last()[0]["action_mask"]
            self.env.step(self.rng.choice([int(a) for a in np.flatnonzero(mask)]))

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        self._open()
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


class Ghost:
    """The self-play's opponents, shared by the envs of one learner: its snapshots (a window of the last ones),
    taken every ``snapshot_every`` of its steps at a game's start (as Shepherd's `Ghost.matchup`), and each game's
    opponent, a frozen policy sampling its actions under the mask."""

    def __init__(self, settings: dict[str, Any], seed: int) -> None:
        self.settings = settings
        self.rng = random.Random(seed)
        self.model: Any = None  # the learner (set once it exists)
        self.pool: collections.deque[dict[str, th.Tensor]] = collections.deque(maxlen=settings["window"])
        self.steps = 0  # the learner's steps, all envs
        self.taken = 0
        self.chosen: collections.Counter[str] = collections.Counter()
        self.learning, self.swap_at = 0, settings.get("swap_every") or 0
        #: scripted opponents in the pool (``opponents``: "module:function", as Shepherd's ``self_play.opponents``)
        self.scripts = {name: getattr(importlib.import_module(name.partition(":")[0]), name.partition(":")[2])
                        for name in settings.get("opponents", [])}

    def side(self, seats: list[str]) -> str:
        """The learning side (``swap_every``: swapped every so many steps, checked when a game begins)."""
        if self.steps >= self.swap_at:
            self.learning, self.swap_at = 1 - self.learning, self.steps + self.settings["swap_every"]
        return seats[self.learning]

    def _state(self) -> dict[str, th.Tensor]:
        return {name: tensor.detach().clone() for name, tensor in self.model.policy.state_dict().items()}

    def opponent(self, frozen: Any) -> Callable[[Any, Any], int]:
        """A new game's opponent, loaded into ``frozen`` (a copy of the learner's policy, one per env)."""
        if not self.pool or self.steps - self.taken >= self.settings["snapshot_every"]:
            self.pool.append(self._state())
            self.taken = self.steps
        if self.rng.random() < self.settings["against_latest"]:
            frozen.load_state_dict(self.model.policy.state_dict())
            self.chosen["latest"] += 1
        else:  # as Shepherd's: one of the snapshots and scripted opponents, uniformly
            picked = self.rng.choice(list(self.pool) + list(self.scripts))
            if isinstance(picked, str):
                self.chosen[picked] += 1
                return self.scripts[picked]
            frozen.load_state_dict(picked)
            self.chosen["snapshot"] += 1
        greedy = self.settings.get("opponent_actions") == "greedy"

        def act(obs: Any, mask: Any) -> int:
            action, _ = frozen.predict(np.asarray(obs, dtype=np.float32), deterministic=greedy,
                                       action_masks=np.asarray(mask, dtype=bool))
            return int(action)

        return act


class AgainstSelf(AgainstScripted):
    """Tic-tac-toe from one player's side against a frozen copy of the learner (`Ghost`), drawn each game."""

    def __init__(self, ghost: Ghost, seed: int, game: str = "tictactoe") -> None:
        super().__init__(boards.uniform, seed, game)
        self.ghost = ghost
        self.frozen: Any = None

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        if self.frozen is None:
            self.frozen = copy.deepcopy(self.ghost.model.policy)
            self.frozen.set_training_mode(False)
        self.opponent = self.ghost.opponent(self.frozen)
        observation, info = super().reset(seed=seed, options=options)
        if self.ghost.settings.get("swap_every"):  # as Shepherd: the learning side swapped every swap_every steps
            self.seat = self.ghost.side(self.env.agents)
            self._open()
            obs, _, _ = self._advance()
            self.mask = obs["action_mask"].astype(bool)
            observation = obs["observation"].astype(np.float32)
        return observation, info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.ghost.steps += 1
        return super().step(action)


def scores(model: Any, opponent: Callable[[Any, Any], int], games: int, seed: int,
           game: str = "tictactoe") -> tuple[float, float]:
    """(share won, share not lost) of the greedy policy over ``games`` games."""
    env, results = AgainstScripted(opponent, seed, game), []
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
    parser.add_argument("--game", choices=sorted(BOARDS), default="tictactoe",
                        help="connect4: selfplay.py's Connect Four hyperparameters, evaluated against the lookahead")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=60_000)
    parser.add_argument("--games", type=int, default=200, help="evaluation games per opponent")
    parser.add_argument("--evaluations", type=int, default=4, help="evaluations along the run, evenly spaced")
    parser.add_argument("--envs", type=int, default=2, help="envs of the VecEnv (selfplay.py's --sessions)")
    parser.add_argument("--against", default="uniform", choices=["uniform", "lookahead", "minimax"],
                        help="without --self-play: the scripted player of benchmarks/boards.py trained against")
    parser.add_argument("--openings", type=int, default=0, metavar="K",
                        help="each training game (not the evaluations) begins with 0 .. K uniform random moves")
    parser.add_argument("--self-play", action="store_true",
                        help="train against frozen copies of itself (selfplay.py's tic-tac-toe self_play settings)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a hyperparameter instead of PARAMETERS' (VALUE as JSON), or a self-play setting "
                             "(snapshot_every, window, against_latest, opponent_actions, opponents, swap_every), "
                             "or features=cnn (the board through BoardCNN); repeatable")
    parser.add_argument("--threads", type=int, default=0, help="torch's threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        th.set_num_threads(args.threads)
    parameters, settings = copy.deepcopy(PARAMETERS[args.game]), dict(SELF_PLAY[args.game])
    for item in args.set:
        name, _, value = item.partition("=")
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        if name in settings:
            settings[name] = parsed
        elif name == "net_arch":
            parameters["policy_kwargs"] = {**parameters.get("policy_kwargs", {}), "net_arch": parsed}
        elif name == "features" and parsed == "cnn":
            parameters["policy_kwargs"] = {**parameters.get("policy_kwargs", {}), "features_extractor_class": BoardCNN}
        else:
            parameters[name] = parsed
    ghost = Ghost(settings, args.seed)

    def make(index: int) -> gym.Env:
        seed = args.seed * 100 + index
        env = (AgainstSelf(ghost, seed, args.game) if args.self_play
               else AgainstScripted(getattr(boards, args.against), seed, args.game))
        env.openings = args.openings
        return ActionMasker(env, lambda env: env.action_masks())

    venv = DummyVecEnv([lambda index=index: make(index) for index in range(args.envs)])
    model = MaskablePPO("MlpPolicy", venv, seed=args.seed, verbose=0, **parameters)
    ghost.model = model
    print(f"seed {args.seed}: {'self-play ' + json.dumps(settings) if args.self_play else 'against ' + args.against}, "
          f"{json.dumps(parameters, default=lambda value: value.__name__)}", flush=True)
    started = time.perf_counter()
    for evaluation in range(args.evaluations):
        model.learn(args.steps // args.evaluations, reset_num_timesteps=False)
        won, _ = scores(model, boards.uniform, args.games, 12345 + evaluation, args.game)
        if args.game == "tictactoe":
            _, kept = scores(model, boards.minimax, args.games, 54321 + evaluation)
            against = f"vs minimax not lost {kept:.0%}"
        else:
            beaten, _ = scores(model, boards.lookahead, args.games, 54321 + evaluation, args.game)
            against = f"vs lookahead won {beaten:.0%}"
        print(f"seed {args.seed}: {model.num_timesteps:6d} steps ({time.perf_counter() - started:.0f} s): "
              f"vs random won {won:.0%}, {against}"
              + (f" (opponents: {dict(ghost.chosen)})" if args.self_play else ""), flush=True)


if __name__ == "__main__":
    main()
