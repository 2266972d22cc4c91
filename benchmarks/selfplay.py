"""Environments with roles (issue 46): what agents learn in them. Each seed starts ``run.py`` (its own process, a
fresh data folder) with a preset of one environment to learn in and a few to evaluate in, and drives the real
PettingZoo env through ``shepherd.client.roles`` (`RolesClient`, `run_aec` / `run_parallel`, or with ``--copies
N`` N copies per session in one vector session: `run_aec_envs`) over HTTP on 127.0.0.1, ``--sessions`` sessions
at once.

- ``--game connect4`` (``pettingzoo.classic.connect_four_v3``, masks) and ``--game tictactoe``
  (``tictactoe_v3``): one MaskablePPO agent (or DQN, ``--algorithm DQN``) learns by self-play from scratch (``self_play:`` in the preset:
  snapshots, the learning side swapped). Its greedy policy is evaluated through the server: sessions in
  ``"mode": "evaluate"`` of environments where the agent plays one side and a scripted player of
  benchmarks/boards.py the other (a uniform random player and the one-move lookahead for Connect Four, the
  perfect minimax player and the random one for tic-tac-toe), half the games as the first player, half as the
  second. The ratings (``/metrics``: ``shepherd_rating_mu``) of the self-play's snapshots are read as the run
  goes: each snapshot's rating, newest last, rising if later snapshots are stronger.
- ``--game mpe``: mpe2's ``simple_adversary_v3`` (parallel; the adversary one PPO agent, the two good agents
  another, as a team), both learning together; each side's greedy policy evaluated against a uniform random
  policy for the other side, before learning and after (and random against random, played here).

The budget is the learning agent's learned steps (its own moves; Connect Four's opponent's moves are not
learned from), as the server counts them. What the players of benchmarks/boards.py do is tested in
tests/unit/test_boards.py. Needs ``pip install -e .[multiagent]`` (pettingzoo, pygame-ce, mpe2).

    python benchmarks/selfplay.py --game connect4 --seeds 3        # the figures in docs/how-to/multi-agent.md
    python benchmarks/selfplay.py --game tictactoe --seeds 3       # (the issue asks for 5 seeds: --seeds 5)
    python benchmarks/selfplay.py --game connect4 --seeds 2 --opponent-actions greedy   # snapshots play greedy
    python benchmarks/selfplay.py --game mpe --seeds 1 --steps 30000 --games 50
    python benchmarks/selfplay.py --game connect4 --quick          # a smoke run: a tiny budget, few games
    python benchmarks/selfplay.py --game tictactoe --seeds 2 --train-against random   # no self-play: the same
                                                                   # agent trained against a scripted player
    python benchmarks/selfplay.py --game tictactoe --set n_epochs=10 --set batch_size=64   # other settings
    python benchmarks/selfplay.py --game tictactoe --algorithm DQN --steps 100000 --copies 8   # DQN with masks
    python benchmarks/selfplay.py --game tictactoe --seeds 1 --steps 400000 --copies 8 --set n_steps=32 \
        --set window=1000 --set against_latest=0.1   # a pool of every past snapshot; 8 copies per session in
                                                     # one vector session (2.7x the steps/s), rollouts unchanged
    python benchmarks/selfplay.py --game tictactoe --seeds 1 --shared   # no self_play: both roles learn
    python benchmarks/selfplay.py --game connect4 --seeds 1 --steps 400000 --keep runs/c4   # keep the data folder,
    python benchmarks/selfplay.py --game connect4 --seeds 1 --steps 800000 --resume runs/c4 # then learn on to 800k
                                     # (the same --set options: the preset is written again from them)
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib
import json
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, Shepherd, connect  # noqa: E402
from shepherd.client.roles import RolesClient, run_aec, run_aec_envs, run_parallel, run_parallel_envs  # noqa: E402

BOARDS = "benchmarks.boards"


@dataclass(frozen=True)
class Game:
    """A game to learn: its PettingZoo env, roles (the env's agents), the agent's spaces and parameters, the
    self-play settings, and the scripted opponents it is evaluated against with the target share of games."""

    env: str  # module:factory
    roles: tuple[str, ...]
    observation_space: list
    actions: int
    parameters: dict[str, Any]
    self_play: dict[str, Any]
    opponents: dict[str, str]  # label -> module:function
    #: label -> (what counts: "wins" or "not lost", the target share)
    targets: dict[str, tuple[str, float]] = field(default_factory=dict)
    budget: int = 100_000


PPO = {"learning_rate": 3e-4, "n_steps": 512, "batch_size": 256, "n_epochs": 4, "gamma": 0.99, "gae_lambda": 0.95,
       "ent_coef": 0.01, "policy_kwargs": {"net_arch": [256, 256]}}
GAMES = {
    "connect4": Game("pettingzoo.classic.connect_four_v3:env", ("player_0", "player_1"), [[6, 7, 2], 0, 1], 7, PPO,
                     {"snapshot_every": 5000, "window": 10, "against_latest": 0.5, "swap_every": 2000},
                     {"random": f"{BOARDS}:uniform", "lookahead": f"{BOARDS}:lookahead"},
                     {"random": ("wins", 0.95), "lookahead": ("wins", 0.60)}, budget=80_000),
    "tictactoe": Game("pettingzoo.classic.tictactoe_v3:env", ("player_1", "player_2"), [[3, 3, 2], 0, 1], 9,
                      {**PPO, "n_steps": 256, "batch_size": 128},
                      {"snapshot_every": 2000, "window": 10, "against_latest": 0.5, "swap_every": 1000},
                      {"minimax": f"{BOARDS}:minimax", "random": f"{BOARDS}:uniform"},
                      {"minimax": ("not lost", 0.90)}, budget=60_000),
}
MPE_ROLES = {"adversary_0": "adversary", "agent_0": "good", "agent_1": "good"}
#: ``--algorithm DQN``: benchmarks/boards_dqn.py's DQN (Shepherd masks it); ``gradient_steps`` is set per run to one
#: per two transitions, as boards_dqn.py's two envs train; its learning_starts is the schedule's heatup_steps (2,000)
DQN = {"learning_rate": 1e-3, "buffer_size": 200_000, "batch_size": 128, "gamma": 0.99,
       "train_freq": 1, "target_update_interval": 1000, "exploration_fraction": 0.3, "exploration_final_eps": 0.05,
       "policy_kwargs": {"net_arch": [256, 256]}}


def overridden(game: Game, settings: list[str]) -> Game:
    """``game`` with ``NAME=VALUE`` settings (``--set``) instead of its hyperparameters or self-play settings."""
    parameters, self_play = copy.deepcopy(game.parameters), dict(game.self_play)
    for item in settings:
        name, _, value = item.partition("=")
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        if name in ("snapshot_every", "window", "against_latest", "swap_every", "opponents", "opponent_actions"):
            self_play[name] = parsed
        elif name == "net_arch":
            parameters["policy_kwargs"] = {**parameters.get("policy_kwargs", {}), "net_arch": parsed}
        else:
            parameters[name] = parsed
    return replace(game, parameters=parameters, self_play=self_play)


def game_preset(game: Game, seed: int, sessions: int, opponent_actions: str | None = None,
                shared: bool = False, copies: int = 1, algorithm: str = "MaskablePPO", budget: int | None = None) -> str:
    """The preset of one seed: the agent, its self-play environment, and one environment per opponent and side
    (``opponent_actions``: the self-play's, None: the preset's default; ``shared``: the self-play environment
    without ``self_play``, the agent in both roles learning from both; ``copies``: of the env per session)."""
    envs = sessions * copies * (len(game.roles) if shared else 1)  # the learned envs
    parameters = {**game.parameters, "n_envs": envs, "seed": seed}
    if algorithm == "DQN":  # (main made DQN's parameters the game's, with --set's on them)
        parameters = {"gradient_steps": max(1, envs // 2), **game.parameters, "n_envs": envs, "seed": seed}
    self_play = {**game.self_play, **({"opponent_actions": opponent_actions} if opponent_actions else {})}
    first, second = game.roles
    lines = ["owner: bench", "agents:",
             f"  - {{name: learner, algorithm: {algorithm}, observation_space: {game.observation_space}, "
             f"action_space: {game.actions}, parameters: {json.dumps(parameters)}}}",
             "schedule: {steps_between_evaluation_periods: 1000000000, evaluation_episodes: 1"
             # the budget (a little past the last evaluation) is what SB3's schedules run over: DQN's epsilon, a
             # linear learning rate (``--set learning_rate=lin_0.0003``); DQN's heatup is its learning_starts
             + (", heatup_steps: 2000" if budget and algorithm == "DQN" else "")
             + (f", improve_steps: {budget + 10_000}" if budget else "") + "}",
             "environments:",
             f"  - {{name: selfplay, roles: {{{first}: learner, {second}: learner}}, turns: alternate"
             + ("}" if shared else f", self_play: {json.dumps(self_play)}}}")]
    for label, function in game.opponents.items():
        lines.append(f"  - {{name: first_vs_{label}, roles: {{{first}: learner, {second}: '{function}'}}, "
                     "turns: alternate}")
        lines.append(f"  - {{name: second_vs_{label}, roles: {{{first}: '{function}', {second}: learner}}, "
                     "turns: alternate}")
    return "\n".join(lines) + "\n"


def mpe_preset(seed: int, sessions: int) -> str:
    parameters = {"learning_rate": 3e-4, "n_steps": 1024, "batch_size": 256, "n_epochs": 4, "gamma": 0.95,
                  "ent_coef": 0.01, "policy_kwargs": {"net_arch": [64, 64]}, "seed": seed}
    return "\n".join([
        "owner: bench", "agents:",
        "  - {name: adversary, algorithm: PPO, observation_space: [[8], -inf, inf], action_space: 5, "
        f"parameters: {json.dumps({**parameters, 'n_envs': sessions})}}}",
        "  - {name: good, algorithm: PPO, observation_space: [[10], -inf, inf], action_space: 5, "
        f"parameters: {json.dumps({**parameters, 'n_envs': 2 * sessions})}}}",
        "schedule: {steps_between_evaluation_periods: 1000000000, evaluation_episodes: 1}",
        "environments:",
        "  - {name: play, roles: {adversary_0: adversary, agent_0: good, agent_1: good}, turns: simultaneous, "
        "teams: {adversaries: [adversary_0], good: [agent_0, agent_1]}}",
        f"  - {{name: adversary_vs_random, roles: {{adversary_0: adversary, agent_0: '{BOARDS}:five', "
        f"agent_1: '{BOARDS}:five'}}, turns: simultaneous}}",
        f"  - {{name: good_vs_random, roles: {{adversary_0: '{BOARDS}:five', agent_0: good, agent_1: good}}, "
        "turns: simultaneous}"]) + "\n"


def make_env(text: str) -> Any:
    module, _, name = text.partition(":")
    return getattr(importlib.import_module(module), name)()


def ratings(url: str, environment: str) -> dict[str, tuple[float, float]]:
    """The ratings of ``environment``'s players from ``/metrics``: player -> (mu, sigma)."""
    connection = connect(url)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    found: dict[str, dict[str, float]] = {}
    for kind, labels, value in re.findall(r'^shepherd_rating_(mu|sigma)\{([^}]*)\} (\S+)$', text, re.M):
        fields = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if fields.get("environment") == environment:
            found.setdefault(fields["player"], {})[kind] = float(value)
    return {player: (values.get("mu", 0.0), values.get("sigma", 0.0)) for player, values in found.items()}


def learned_steps(url: str, agent: str) -> int:
    connection = connect(url)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    match = re.search(r'^shepherd_agent_learned_steps\{[^}]*agent="[^"]*?' + agent + r'"[^}]*\} (\S+)$', text, re.M)
    return int(float(match.group(1))) if match else 0


def snapshot_version(player: str) -> int | None:
    match = re.search(r"@snapshot:(\d+)$", player)
    return int(match.group(1)) if match else None


class Trainers:
    """``sessions`` threads, each one session of a learning environment (of ``keys``, in turn) playing whole
    episodes until paused."""

    def __init__(self, url: str, keys: list[str], env: str, sessions: int, seed: int, copies: int = 1) -> None:
        self.url, self.env, self.seed, self.copies = url, env, seed, copies
        self.clients = [RolesClient(url, keys[index % len(keys)]) for index in range(sessions)]
        self.envs = [[make_env(env) for _ in range(copies)] for _ in range(sessions)]
        self.episodes = 0
        self.errors: list[BaseException] = []
        if copies == 1:
            for client in self.clients:
                client.login()

    def run_until(self, done: Callable[[], bool]) -> None:
        """Play until ``done()`` (checked by the caller's thread every second), each session ending its episode."""
        stop = threading.Event()

        def play(index: int) -> None:
            client, envs = self.clients[index], self.envs[index]
            aec = hasattr(envs[0], "agent_iter")
            try:
                if self.copies > 1:  # a vector session for this phase: its copies' unfinished episodes end with it
                    client.login("train", self.copies)
                    run_envs = run_aec_envs if aec else run_parallel_envs
                    self.episodes += len(run_envs(envs, client, 2 ** 62, stop=stop.is_set,
                                                  seed=self.seed * 1_000_003 + index * 100_003 + self.episodes))
                    client.logout()
                while self.copies == 1 and not stop.is_set():
                    (run_aec if aec else run_parallel)(envs[0], client, 1,
                                                       seed=self.seed * 1_000_003 + index * 100_003 + self.episodes)
                    self.episodes += 1
            except BaseException as error:  # noqa: BLE001 - said by the caller
                self.errors.append(error)
                stop.set()

        threads = [threading.Thread(target=play, args=(index,), daemon=True) for index in range(len(self.clients))]
        for thread in threads:
            thread.start()
        try:
            while not stop.is_set() and not done():
                time.sleep(1.0)
        finally:  # (Ctrl-C too) each session ends its episode before the server stops
            stop.set()
            for thread in threads:
                thread.join()
        if self.errors:
            raise RuntimeError(f"a training session failed: {self.errors[0]!r}") from self.errors[0]

    def close(self) -> None:
        for client in self.clients:
            try:
                client.logout()
            except OSError:  # the server closed the connection, idle through a long evaluation: the session
                pass         # expires with it (a logout is no retried step)
            finally:
                client.close()


def evaluate(url: str, key: str, env_name: str, games: int, side: str, seed: int) -> list[float]:
    """``games`` episodes of an evaluation environment in ``"mode": "evaluate"``: the returns of ``side``."""
    env = make_env(env_name)
    client = RolesClient(url, key)
    client.login("evaluate")
    try:
        run = run_aec if hasattr(env, "agent_iter") else run_parallel
        return [returns.get(side, 0.0) for returns in run(env, client, games, seed=seed)]
    finally:
        client.logout()
        client.close()


def board_scores(url: str, keys: dict[str, str], game: Game, games: int, seed: int) -> dict[str, tuple[float, float]]:
    """Against each opponent, half the games on each side: (share won, share not lost)."""
    first, second = game.roles
    scores = {}
    for label in game.opponents:
        returns = (evaluate(url, keys[f"first_vs_{label}"], game.env, games // 2, first, seed)
                   + evaluate(url, keys[f"second_vs_{label}"], game.env, games - games // 2, second, seed + 1))
        scores[label] = (sum(r > 0 for r in returns) / len(returns), sum(r >= 0 for r in returns) / len(returns))
    return scores


def play_board(args: argparse.Namespace, game: Game, seed: int, folder: Path) -> dict[str, Any]:
    preset = folder / f"{args.game}_{seed}.yaml"
    preset.write_text(game_preset(game, seed, args.sessions, args.opponent_actions, args.shared, args.copies,
                                  args.algorithm, args.steps))
    data = folder / f"data_{seed}"
    if args.resume and not data.is_dir():
        raise SystemExit(f"--resume {folder}: no {data.name} (seeds {args.first_seed}... were not kept there)")
    made = new_keys(data, [line.split("name: ", 1)[1].split(",", 1)[0] for line in
                           preset.read_text().splitlines() if line.startswith("  - {name: ")
                           and "roles:" in line]) if args.resume else {}
    server = Shepherd(preset, data)
    try:
        keys = made or dict(re.findall(r"API key for environment (\S+) \(.*\): (\S+)", "".join(server.lines)))
        learning = ([keys["selfplay"]] if args.train_against is None else  # or the scripted player's, both sides
                    [keys[f"first_vs_{args.train_against}"], keys[f"second_vs_{args.train_against}"]])
        trainers = Trainers(server.url, learning, game.env, args.sessions, seed, args.copies)
        curve: list[tuple[int, float, dict[str, tuple[float, float]]]] = []
        latest: list[tuple[int, str, float, float]] = []  # (learned steps, newest snapshot, its mu, sigma)
        started, evaluating = time.perf_counter(), 0.0
        phases, begun_at = args.evaluations, learned_steps(server.url, "learner")  # (0 unless resumed)
        for phase in range(1, phases + 1):
            goal = begun_at + (args.steps - begun_at) * phase // phases

            def reached() -> bool:
                steps = learned_steps(server.url, "learner")
                table = ratings(server.url, "selfplay")
                snapshots = sorted((v, p) for p in table if (v := snapshot_version(p)) is not None)
                if snapshots:
                    player = snapshots[-1][1]
                    latest.append((steps, player, *table[player]))
                return steps >= goal

            trainers.run_until(reached)
            begun = time.perf_counter()
            games = args.games if phase == phases else max(args.games // 4, 2)
            curve.append((learned_steps(server.url, "learner"), time.perf_counter() - started - evaluating,
                          board_scores(server.url, keys, game, games, seed * 7919 + phase * 101)))
            evaluating += time.perf_counter() - begun
            steps, seconds, scores = curve[-1]
            print(f"  seed {seed}: {steps:7d} steps, {seconds:6.0f} s learning: "
                  + ", ".join(f"vs {label} won {won:.0%} not lost {kept:.0%}" for label, (won, kept) in scores.items()),
                  flush=True)
        trainers.close()
        table = ratings(server.url, "selfplay")
    finally:
        server.stop()
    return {"curve": curve, "latest": latest, "ratings": table, "episodes": trainers.episodes,
            "learning_seconds": curve[-1][1], "evaluating_seconds": evaluating}


def new_keys(data: Path, environments: list[str]) -> dict[str, str]:
    """A new key for each environment of a kept data folder (``--resume``: the first run's were shown once)."""
    keys = {}
    for name in environments:
        done = subprocess.run([sys.executable, str(ROOT / "run.py"), "keys", "add", "--data", str(data),
                               f"bench/{name}"], capture_output=True, text=True, cwd=ROOT)
        found = re.search(r"^(\S{20,})\s*\Z", done.stdout, re.M)  # the key: the last line (it may begin with -)
        if done.returncode or not found:
            raise SystemExit(f"run.py keys add bench/{name} --data {data}: {done.stdout}{done.stderr}")
        keys[name] = found.group(1)
    return keys


def rank_correlation(pairs: list[tuple[float, float]]) -> float:
    """Spearman's rank correlation of (x, y) pairs (ties: average ranks)."""
    if len(pairs) < 3:
        return float("nan")

    def ranks(values: list[float]) -> list[float]:
        order = sorted(range(len(values)), key=values.__getitem__)
        result = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                result[order[k]] = (i + j) / 2
            i = j + 1
        return result

    xs, ys = ranks([x for x, _ in pairs]), ranks([y for _, y in pairs])
    return statistics.correlation(xs, ys) if len(set(xs)) > 1 and len(set(ys)) > 1 else float("nan")


def report_board(args: argparse.Namespace, game: Game, results: dict[int, dict[str, Any]]) -> None:
    labels = list(game.opponents)
    print(f"\n{args.game}: {args.algorithm} self-play from scratch, budget {args.steps} learned steps per seed, "
          f"parameters {json.dumps(game.parameters)}, self_play {json.dumps(game.self_play)}, "
          f"opponents' actions {args.opponent_actions or 'sample (the default)'}, "
          f"{args.sessions} sessions, final evaluation {args.games} greedy games per opponent (half on each side)")
    header = "seed  learned  learn s  episodes  " + "  ".join(f"{'vs ' + l + ' won':>16} {'not lost':>8}" for l in labels)
    print(header + "  snapshots  rank corr  first mu  last mu")
    finals: dict[str, list[tuple[float, float]]] = {label: [] for label in labels}
    for seed, result in results.items():
        steps, seconds, scores = result["curve"][-1]
        snaps = sorted((v, mu) for p, (mu, _) in result["ratings"].items() if (v := snapshot_version(p)) is not None)
        correlation = rank_correlation([(float(v), mu) for v, mu in snaps])
        for label in labels:
            finals[label].append(scores[label])
        print(f"{seed:4d} {steps:8d} {seconds:8.0f} {result['episodes']:9d}  "
              + "  ".join(f"{scores[l][0]:16.0%} {scores[l][1]:8.0%}" for l in labels)
              + f"  {len(snaps):9d} {correlation:10.2f} {snaps[0][1] if snaps else float('nan'):9.1f}"
              f" {snaps[-1][1] if snaps else float('nan'):8.1f}")
    print("median" + " " * 29 + "  ".join(
        f"{statistics.median(w for w, _ in finals[l]):16.0%} {statistics.median(k for _, k in finals[l]):8.0%}"
        for l in labels))
    for label, (what, target) in game.targets.items():
        share = statistics.median((w if what == "wins" else k) for w, k in finals[label])
        print(f"target vs {label}: {what} >= {target:.0%}: median {share:.0%} -> {'met' if share >= target else 'MISSED'}")
    for seed, result in results.items():
        snaps = sorted((v, p, mu, sigma) for p, (mu, sigma) in result["ratings"].items()
                       if (v := snapshot_version(p)) is not None)
        learner = result["ratings"].get("learner", (float("nan"), float("nan")))
        scripted = sorted((p, mu, sigma) for p, (mu, sigma) in result["ratings"].items() if ":" in p and "@" not in p)
        print(f"seed {seed} ratings (mu +- sigma), snapshots by version: "
              + ", ".join(f"v{v} {mu:.1f}+-{sigma:.1f}" for v, _, mu, sigma in snaps)
              + f"; the learner {learner[0]:.1f}+-{learner[1]:.1f}"
              + "".join(f"; scripted {p} {mu:.1f}+-{sigma:.1f}" for p, mu, sigma in scripted))
        seen, rising = set(), []
        for steps, player, mu, _ in result["latest"]:
            if player not in seen:
                seen.add(player)
                rising.append(f"{steps}: {player.split('@')[-1]} {mu:.1f}")
        print(f"seed {seed} newest snapshot's rating when first seen rated (learned steps: snapshot mu): "
              + "; ".join(rising[:: max(1, len(rising) // 12)]))
        print(f"seed {seed} curve (learned steps: " + ", ".join(f"vs {l} won" for l in labels) + "): "
              + "; ".join(f"{s}: " + "/".join(f"{sc[l][0]:.0%}" for l in labels) for s, _, sc in result["curve"])
              + f"; learning {result['learning_seconds']:.0f} s, evaluating {result['evaluating_seconds']:.0f} s")


def random_mpe(episodes: int, seed: int) -> dict[str, float]:
    """Random against random: the mean return of each side (the adversary, a good agent's mean) played here."""
    env = make_env("mpe2.simple_adversary_v3:parallel_env")
    rng = random.Random(seed)
    totals = {"adversary": 0.0, "good": 0.0}
    for episode in range(episodes):
        observations, _ = env.reset(seed=seed + episode)
        while env.agents:
            observations, rewards, *_ = env.step({agent: rng.randrange(5) for agent in env.agents})
            totals["adversary"] += rewards.get("adversary_0", 0.0)
            totals["good"] += (rewards.get("agent_0", 0.0) + rewards.get("agent_1", 0.0)) / 2
    return {side: value / episodes for side, value in totals.items()}


def mpe_scores(url: str, keys: dict[str, str], games: int, seed: int) -> dict[str, float]:
    env = "mpe2.simple_adversary_v3:parallel_env"
    adversary = evaluate(url, keys["adversary_vs_random"], env, games, "adversary_0", seed)
    good = [a + b for a, b in zip(evaluate(url, keys["good_vs_random"], env, games, "agent_0", seed),
                                  evaluate(url, keys["good_vs_random"], env, games, "agent_1", seed))]
    return {"adversary": statistics.mean(adversary), "good": statistics.mean(good) / 2}


def play_mpe(args: argparse.Namespace, seed: int, folder: Path) -> dict[str, Any]:
    preset = folder / f"mpe_{seed}.yaml"
    preset.write_text(mpe_preset(seed, args.sessions))
    server = Shepherd(preset, folder / f"data_{seed}")
    try:
        keys = dict(re.findall(r"API key for environment (\S+) \(.*\): (\S+)", "".join(server.lines)))
        before = mpe_scores(server.url, keys, args.games, seed * 7919)
        trainers = Trainers(server.url, [keys["play"]], "mpe2.simple_adversary_v3:parallel_env", args.sessions, seed)
        started = time.perf_counter()
        trainers.run_until(lambda: learned_steps(server.url, "adversary") >= args.steps)
        seconds = time.perf_counter() - started
        trainers.close()
        steps = learned_steps(server.url, "adversary")
        after = mpe_scores(server.url, keys, args.games, seed * 7919)
        table = ratings(server.url, "play")
    finally:
        server.stop()
    return {"before": before, "after": after, "steps": steps, "seconds": seconds, "ratings": table}


def report_mpe(args: argparse.Namespace, results: dict[int, dict[str, Any]]) -> None:
    baseline = random_mpe(args.games, 0)
    print(f"\nmpe2 simple_adversary_v3: PPO adversary and PPO good agents learning together, budget {args.steps} "
          f"adversary steps per seed ({args.sessions} sessions); mean return per episode of each side's greedy policy "
          f"against a uniform random other side, {args.games} episodes")
    print(f"random vs random: adversary {baseline['adversary']:.2f}, good agent {baseline['good']:.2f}")
    print("seed  learned  learn s  adversary before  after  good before  after")
    for seed, r in results.items():
        print(f"{seed:4d} {r['steps']:8d} {r['seconds']:8.0f} {r['before']['adversary']:17.2f} {r['after']['adversary']:6.2f}"
              f" {r['before']['good']:12.2f} {r['after']['good']:6.2f}   ratings: "
              + ", ".join(f"{p} {mu:.1f}+-{s:.1f}" for p, (mu, s) in r["ratings"].items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--game", choices=("connect4", "tictactoe", "mpe"), default="connect4")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0, help="the seeds run: first-seed ... first-seed + seeds - 1")
    parser.add_argument("--steps", type=int, default=None, help="the budget: learned steps per seed")
    parser.add_argument("--games", type=int, default=200, help="evaluation games per opponent (mpe: episodes)")
    parser.add_argument("--evaluations", type=int, default=4, help="evaluations along the run (the last: --games)")
    parser.add_argument("--sessions", type=int, default=2, help="training sessions at once (the agent's n_envs)")
    parser.add_argument("--copies", type=int, default=1,
                        help="copies of the env per training session, stepped together in one vector session (the "
                             "agent's n_envs: sessions x copies); 1: one env per session, a request per move")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 seed, 3000 steps, 20 games")
    parser.add_argument("--algorithm", choices=("MaskablePPO", "DQN"), default="MaskablePPO",
                        help="the board games' learner: MaskablePPO (GAMES' parameters) or DQN with masks (DQN's)")
    parser.add_argument("--opponent-actions", choices=("sample", "greedy"), default=None,
                        help="the self-play's opponent_actions (default: the preset's default, sample)")
    parser.add_argument("--shared", action="store_true",
                        help="no self_play: the agent plays both roles at once and learns from both (its opponent "
                             "is its current policy; no snapshots, no ratings)")
    parser.add_argument("--train-against", default=None, metavar="OPPONENT",
                        help="no self-play: train against one of the game's scripted players (random, lookahead, "
                             "minimax), half the sessions on each side")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a hyperparameter instead of the game's or --algorithm DQN's (VALUE as JSON; net_arch: "
                             "the policy's; DQN's gradient_steps: one per two transitions unless set), or a "
                             "self_play setting (snapshot_every, window, against_latest, swap_every, opponents); "
                             "repeatable")
    parser.add_argument("--keep", default=None, metavar="FOLDER",
                        help="keep each seed's preset and server data folder (FOLDER/data_SEED: the agent's checkpoint "
                             "in agents/1/model.zip, for benchmarks/board_tactics.py) instead of a temporary folder")
    parser.add_argument("--resume", default=None, metavar="FOLDER",
                        help="go on with the seeds a --keep FOLDER run kept: each server resumes from its data folder "
                             "(the agent's checkpoint, the snapshot pool and the ratings) with the preset's budget "
                             "raised to --steps, and learns on to --steps; the evaluations are spread over the steps "
                             "left; new environment keys are made (the first run's were shown once)")
    args = parser.parse_args()
    if args.resume and args.keep:
        parser.error("--resume FOLDER goes on in FOLDER: no --keep with it")
    if args.game in GAMES and args.algorithm == "DQN":
        GAMES[args.game] = replace(GAMES[args.game], parameters=copy.deepcopy(DQN))
    if args.game in GAMES and args.set:
        GAMES[args.game] = overridden(GAMES[args.game], args.set)
    if args.quick:
        args.seeds, args.steps, args.games, args.evaluations = 1, args.steps or 3000, 20, 2
    if args.steps is None:
        args.steps = GAMES[args.game].budget if args.game in GAMES else 50_000
    results: dict[int, dict[str, Any]] = {}
    with contextlib.ExitStack() as stack:
        folder = args.resume or args.keep or stack.enter_context(tempfile.TemporaryDirectory())
        if args.keep and Path(args.keep).exists() and any(Path(args.keep).iterdir()):
            parser.error(f"--keep {args.keep}: not empty (each run learns from scratch in a folder of its own)")
        Path(folder).mkdir(parents=True, exist_ok=True)
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            if args.game == "mpe":
                results[seed] = play_mpe(args, seed, Path(folder))
            else:
                results[seed] = play_board(args, GAMES[args.game], seed, Path(folder))
    if args.game == "mpe":
        report_mpe(args, results)
    else:
        report_board(args, GAMES[args.game], results)


if __name__ == "__main__":
    main()
