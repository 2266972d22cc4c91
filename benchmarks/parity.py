"""Parity: does an agent learn through Shepherd as well as with SB3's own ``learn()``?

For each algorithm, the same hyperparameters and step budget are trained two ways, over several seeds:
SB3's ``learn()`` on a local gymnasium env, and a Shepherd server over loopback HTTP (a real
``RunningServer``) driven by one ``shepherd.client.Client``. Each final model is then evaluated greedily on
the same evaluation episodes (same env seeds). The table gives both medians and their ratio on returns
normalised to the env's random-to-solved range (0 = a random policy, measured here on the same episodes;
1 = the env's reward threshold, or the documented value below). Target: ratio >= 0.9.

    .venv/bin/python benchmarks/parity.py                        # every algorithm, 3 seeds
    .venv/bin/python benchmarks/parity.py --algos QRDQN,TQC,CrossQ,TRPO   # sb3-contrib's
    .venv/bin/python benchmarks/parity.py --algos SAC,TD3 --seeds 5
    .venv/bin/python benchmarks/parity.py --algos A2C --seeds 10 --first-seed 10   # seeds 10..19
    .venv/bin/python benchmarks/parity.py --algos DQN --acting client --max-policy-lag 1   # issue 35
    .venv/bin/python benchmarks/parity.py --preset cartpole_ppo --steps 10240 --seeds 10 --acting client

``--acting client``: Shepherd's client acts with the policy file and uploads its experience
(`shepherd.client.ActingClient`, one env); it uploads whole blocks (``n_steps`` or ``train_freq`` steps), so
it learns from the budget rounded up to a whole block. ``--max-policy-lag N`` sets the agent's parameter.

``--preset NAME --steps N``: a preset's agent instead of the cases below (its algorithm and parameters, its
validation env), both ways with its ``n_envs`` envs: SB3 with a ``VecEnv`` of that many, Shepherd with one
client of that many (`ActingClient` with ``--acting client``, else a `VectorClient`), each for ``N`` steps.
That is the preset's learning at equal steps, where ``run.py``'s time to the target also counts the seeds'
luck and the speed.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch as th

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shepherd.agents import algorithm_info, sb3_arguments  # noqa: E402
from shepherd.agents.factories import policy_name  # noqa: E402
from shepherd.client import Client, env_action_mask, run_env  # noqa: E402
from shepherd.graph import AgentSpec, GraphManager, Schedule  # noqa: E402
from shepherd.http import ServerConfig  # noqa: E402
from shepherd.http.server import RunningServer  # noqa: E402
from shepherd.wire.spaces import action_from_json, space_to_json  # noqa: E402

logger = logging.getLogger(__name__)

SOLVED = {"Pendulum-v1": -150.0,  # no reward threshold in gymnasium's spec: RL Zoo's SAC and TD3 reach it
          "shepherd.envs.gridworld:MaskedGrid-v0": -14.0}  # the maze's shortest path


@dataclass(frozen=True)
class Case:
    """One algorithm's benchmark: env, budget and hyperparameters (RL Zoo's, budgets cut for 2 cores)."""

    env_id: str
    steps: int
    params: dict[str, Any] = field(default_factory=dict)


CASES: dict[str, Case] = {
    "PPO": Case("CartPole-v1", 20_480, {
        "n_steps": 512, "batch_size": 64, "n_epochs": 10, "gamma": 0.98, "gae_lambda": 0.8,
        "ent_coef": 0.0, "learning_rate": "lin_0.001", "clip_range": "lin_0.2"}),
    "A2C": Case("CartPole-v1", 40_000, {
        "n_steps": 8, "gamma": 0.99, "ent_coef": 0.0, "learning_rate": "lin_0.001"}),
    "DQN": Case("CartPole-v1", 40_000, {
        "learning_rate": 2.3e-3, "batch_size": 64, "buffer_size": 100_000, "learning_starts": 1000,
        "gamma": 0.99, "target_update_interval": 10, "train_freq": 256, "gradient_steps": 128,
        "exploration_fraction": 0.16, "exploration_final_eps": 0.04, "policy_kwargs": {"net_arch": [256, 256]}}),
    "SAC": Case("Pendulum-v1", 6_000, {
        "learning_rate": 1e-3, "learning_starts": 1000, "policy_kwargs": {"net_arch": [64, 64]}}),
    "TD3": Case("Pendulum-v1", 8_000, {
        "learning_rate": 1e-3, "learning_starts": 1000, "action_noise": "normal", "action_noise_sigma": 0.1,
        "policy_kwargs": {"net_arch": [64, 64]}}),
    "DDPG": Case("Pendulum-v1", 8_000, {
        "learning_rate": 1e-3, "learning_starts": 1000, "action_noise": "ornstein-uhlenbeck",
        "action_noise_sigma": 0.1, "policy_kwargs": {"net_arch": [64, 64]}}),
    # sb3-contrib's (RL Zoo's hyperparameters; TQC without gSDE, which a pooled learner does not serve)
    "QRDQN": Case("CartPole-v1", 40_000, {
        "learning_rate": 2.3e-3, "batch_size": 64, "buffer_size": 100_000, "learning_starts": 1000,
        "gamma": 0.99, "target_update_interval": 10, "train_freq": 256, "gradient_steps": 128,
        "exploration_fraction": 0.16, "exploration_final_eps": 0.04,
        "policy_kwargs": {"net_arch": [256, 256], "n_quantiles": 10}}),
    "TQC": Case("Pendulum-v1", 8_000, {
        "learning_rate": 1e-3, "learning_starts": 100, "train_freq": 64, "gradient_steps": 64,
        "policy_kwargs": {"net_arch": [64, 64]}}),
    "CrossQ": Case("Pendulum-v1", 6_000, {
        "learning_starts": 100, "policy_delay": 2, "policy_kwargs": {"net_arch": [256, 256]}}),
    "TRPO": Case("CartPole-v1", 50_000, {  # RL Zoo's 2 envs of 512 steps as one segment of 1024 (one client)
        "n_steps": 1024, "batch_size": 512, "cg_damping": 1e-3, "gae_lambda": 0.98, "gamma": 0.99,
        "learning_rate": 1e-3, "n_critic_updates": 20}),
    # the maze whose walls make moves invalid: the client sends each step's action mask (ActionMasker's)
    # RL Zoo's PPO CartPole settings with a small LSTM (one env, so one rollout of 512 steps)
    "RecurrentPPO": Case("CartPole-v1", 20_480, {
        "n_steps": 512, "batch_size": 64, "n_epochs": 10, "gamma": 0.98, "gae_lambda": 0.8,
        "ent_coef": 0.0, "learning_rate": "lin_0.001", "clip_range": "lin_0.2",
        "policy_kwargs": {"lstm_hidden_size": 32, "net_arch": [64]}}),
    "MaskablePPO": Case("shepherd.envs.gridworld:MaskedGrid-v0", 10_000, {
        "n_steps": 256, "batch_size": 64, "n_epochs": 10, "gamma": 0.99, "ent_coef": 0.01,
        "learning_rate": 1e-3}),
}


def evaluate(policy: Callable[[Any, Any], Any], env_id: str, seed: int, episodes: int) -> list[float]:
    """Returns of ``episodes`` episodes of a policy of (observation, action mask or None); the env's first
    reset is seeded."""
    env = gym.make(env_id)
    returns = []
    obs, _ = env.reset(seed=seed)
    for _ in range(episodes):
        total, done = 0.0, False
        getattr(policy, "reset", lambda: None)()  # a recurrent policy starts each episode from a zero state
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy(obs, env_action_mask(env)))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
        obs, _ = env.reset()
    env.close()
    return returns


def random_action(space: gym.Space, mask: Any) -> Any:
    """A random action, among the valid ones when the env tells them (random play never picks an invalid one)."""
    return space.sample() if mask is None else space.sample(mask=np.asarray(mask, dtype=np.int8))


def sb3_run(algorithm: str, case: Case, seed: int, episodes: int) -> list[float]:
    """SB3's own ``learn()`` on a local env, then a greedy evaluation."""
    from stable_baselines3.common.env_util import make_vec_env

    env = gym.make(case.env_id)
    kwargs, n_envs = sb3_arguments(algorithm, env.action_space, {**case.params, "seed": seed})
    vec_env = make_vec_env(case.env_id, n_envs=n_envs, seed=seed)
    model = algorithm_info(algorithm).sb3_class(policy_name(env.observation_space, algorithm), vec_env, device="cpu",
                                                verbose=0, **kwargs)
    model.learn(case.steps)
    return evaluate(Predictor(model), case.env_id, 10_000 + seed, episodes)


class Predictor:
    """SB3's deterministic ``predict`` as an evaluation policy: the env's action mask passed on (MaskablePPO),
    and a recurrent model's LSTM state carried through an episode (RecurrentPPO), reset by `reset`."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.recurrent = getattr(model.policy, "lstm_actor", None) is not None
        self.state: Any = None
        self.start = True

    def reset(self) -> None:
        self.state, self.start = None, True

    def __call__(self, obs: Any, mask: Any) -> Any:
        kwargs: dict[str, Any] = {} if mask is None else {"action_masks": np.asarray(mask)}
        if self.recurrent:
            kwargs.update(state=self.state, episode_start=np.array([self.start]))
        action, self.state = self.model.predict(obs, deterministic=True, **kwargs)
        self.start = False
        return action


def _train_client(url: str, key: str, env_id: str, seed: int, steps: int) -> None:
    """Exactly ``steps`` transitions through one client session, then log out."""
    client = Client(url, key)
    env = gym.make(env_id)
    try:
        client.login()
        obs, _ = env.reset(seed=seed)
        action = client.step(obs, 0.0, False, action_mask=env_action_mask(env))
        for _ in range(steps):
            obs, reward, terminated, truncated, _ = env.step(action_from_json(env.action_space, action))
            done = terminated or truncated
            action = client.step(obs, reward, done, truncated=truncated and not terminated,
                                 action_mask=None if done else env_action_mask(env))
            if action is None:
                obs, _ = env.reset()
                action = client.step(obs, 0.0, False, action_mask=env_action_mask(env))
        client.logout()
    finally:
        client.close()
        env.close()


def _evaluate_client(url: str, key: str, env_id: str, seed: int, episodes: int) -> list[float]:
    client = Client(url, key)
    try:
        client.login(mode="evaluate")
        returns = run_env(client, env_id, seed=seed, episodes=episodes, mode="evaluate")
        client.logout()
        return returns
    finally:
        client.close()


def _train_vector_client(url: str, key: str, env_id: str, seed: int, steps: int, n_envs: int) -> None:
    """At least ``steps`` transitions through one vector session of ``n_envs`` envs, then log out."""
    from shepherd.client import VectorClient, first_vector_step, gymnasium_vector_step, make_vector_env
    from shepherd.client.loops import _actions

    client = VectorClient(url, key, n_envs)
    env = make_vector_env(env_id, n_envs)
    try:
        client.login()
        obs, _ = env.reset(seed=seed)
        body, space, done = first_vector_step(obs, n_envs), env.single_action_space, 0
        while done < steps:
            body = gymnasium_vector_step(*env.step(_actions(space, client.step(**body))))
            done += n_envs
        client.step(**body)  # the last steps' rewards reach the server
        client.logout()
    finally:
        client.close()
        env.close()


def _train_acting_client(url: str, key: str, env_id: str, seed: int, steps: int, n_envs: int = 1) -> None:
    """At least ``steps`` transitions acted at the client and uploaded in blocks, then log out."""
    from shepherd.client.acting import ActingClient, run_acting_env

    client = ActingClient(url, key, n_envs, seed=seed)
    try:
        run_acting_env(client, env_id, seed=seed, steps=steps)
        client.logout()
    finally:
        client.close()


async def _shepherd(algorithm: str, case: Case, seed: int, episodes: int, data: Path, acting: str = "server",
                    lag: int = 0) -> list[float]:
    env = gym.make(case.env_id)
    params = {**case.params, "seed": seed, **({"max_policy_lag": lag} if lag else {})}
    heatup = params.get("learning_starts", 0) if not algorithm_info(algorithm).on_policy else 0
    graph = GraphManager(
        agents=[AgentSpec("parity", algorithm, space_to_json(env.observation_space),
                          space_to_json(env.action_space), params)],
        schedule=Schedule(heatup_steps=heatup, improve_steps=case.steps, steps_between_evaluation_periods=None,
                          evaluation_episodes=0, checkpoint_every_steps=10 * case.steps,
                          checkpoint_every_seconds=3600.0))
    server = await RunningServer.start(ServerConfig(graph, data), "127.0.0.1", 0)
    try:
        key = server.created_keys["parity"]
        n_envs = int(params.get("n_envs", 1))
        if acting == "client":
            train: Callable[..., None] = functools.partial(_train_acting_client, n_envs=n_envs)
        else:
            train = functools.partial(_train_vector_client, n_envs=n_envs) if n_envs > 1 else _train_client
        await asyncio.to_thread(train, server.url, key, case.env_id, seed, case.steps)
        learned = graph.runtime("parity").learner.steps
        if learned != case.steps and not ((acting == "client" or n_envs > 1) and learned >= case.steps):
            raise RuntimeError(f"Shepherd learned from {learned} transitions, not {case.steps}")
        return await asyncio.to_thread(_evaluate_client, server.url, key, case.env_id, 10_000 + seed, episodes)
    finally:
        await server.stop()


def shepherd_run(algorithm: str, case: Case, seed: int, episodes: int, acting: str = "server", lag: int = 0
                 ) -> list[float]:
    """Shepherd over loopback HTTP with one client, then a greedy evaluation through an evaluate session."""
    with tempfile.TemporaryDirectory(prefix="shepherd-parity-") as folder:
        return asyncio.run(_shepherd(algorithm, case, seed, episodes, Path(folder), acting, lag))


def normalise(value: float, random: float, solved: float) -> float:
    return (value - random) / (solved - random)


def row_text(row: tuple) -> str:
    """One algorithm's line of the Markdown table."""
    algorithm, case, random_return, solved, results, sb3, shepherd, ratio, seconds = row
    per_seed = {way: ", ".join(f"{v:.1f}" for v in values) for way, values in results.items()}
    return (f"| {algorithm} | {case.env_id} | {case.steps:,} | {random_return:.1f} | {solved:g} | "
            f"{per_seed['sb3']} | {per_seed['shepherd']} | {sb3:.1f} | {shepherd:.1f} | "
            f"{ratio:.2f}{'' if ratio >= 0.9 else ' (below 0.9)'} | "
            f"{seconds['sb3']:.0f} s / {seconds['shepherd']:.0f} s |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algos", default=",".join(CASES), help="comma-separated (default: all)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per algorithm and way (default 3)")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="the first seed (default 0): split a long run over processes")
    parser.add_argument("--episodes", type=int, default=10, help="evaluation episodes per model (default 10)")
    parser.add_argument("--acting", choices=["server", "client"], default="server",
                        help="where Shepherd's training client acts (default server; client: issue 35's uploads)")
    parser.add_argument("--max-policy-lag", type=int, default=0, metavar="N",
                        help="the Shepherd agent's max_policy_lag (off-policy, with --acting client)")
    parser.add_argument("--preset", metavar="NAME",
                        help="a preset's agent (its algorithm, parameters, n_envs and validation env) instead of "
                             "--algos; needs --steps")
    parser.add_argument("--steps", type=int, metavar="N", help="with --preset: env steps each way")
    args = parser.parse_args(argv)
    if (args.preset is None) != (args.steps is None):
        parser.error("--preset and --steps go together")
    if args.preset is not None:
        from shepherd.loading.presets import load_preset

        preset = load_preset(args.preset)
        if preset.validation is None:
            parser.error(f"preset {args.preset} has no validation env to learn on")
        spec = next((a for a in preset.agents if a.name == preset.validation.agent), preset.agents[0])
        CASES[spec.algorithm] = Case(preset.validation.env_id, args.steps, dict(spec.parameters))
        args.algos = spec.algorithm
    logging.basicConfig(level=logging.WARNING)
    th.set_num_threads(1)  # as the learner threads do
    by_upper = {name.upper(): name for name in CASES}  # names in any case: "crossq" is CrossQ
    algorithms = [by_upper.get(a.strip().upper(), a.strip()) for a in args.algos.split(",") if a.strip()]
    for algorithm in algorithms:
        if algorithm not in CASES:
            parser.error(f"unknown algorithm {algorithm}; choose from {', '.join(CASES)}")
    print(f"parity benchmark, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
          f"{platform.processor() or platform.machine()}, python {platform.python_version()}, "
          f"torch {th.__version__}, {args.seeds} seeds, {args.episodes} evaluation episodes, Shepherd acting at the "
          f"{args.acting}" + (f", max_policy_lag {args.max_policy_lag}" if args.max_policy_lag else ""), flush=True)
    rows = []
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    for algorithm in algorithms:
        case = CASES[algorithm]
        env = gym.make(case.env_id)  # (first: an id of the form module:Env-v0 imports its module)
        solved = SOLVED[case.env_id] if case.env_id in SOLVED else gym.spec(case.env_id).reward_threshold
        env.action_space.seed(0)
        random_return = statistics.median(
            statistics.fmean(evaluate(lambda obs, mask: random_action(env.action_space, mask), case.env_id, 10_000 + s,
                                      args.episodes)) for s in seeds)
        results: dict[str, list[float]] = {"sb3": [], "shepherd": []}
        seconds = {"sb3": 0.0, "shepherd": 0.0}
        for seed in seeds:
            ours = functools.partial(shepherd_run, acting=args.acting, lag=args.max_policy_lag)
            for way, run in (("sb3", sb3_run), ("shepherd", ours)):
                started = time.monotonic()
                results[way].append(statistics.fmean(run(algorithm, case, seed, args.episodes)))
                seconds[way] += time.monotonic() - started
            print(f"  {algorithm} seed {seed}: sb3 {results['sb3'][-1]:9.2f}  shepherd "
                  f"{results['shepherd'][-1]:9.2f}", flush=True)
        sb3, shepherd = statistics.median(results["sb3"]), statistics.median(results["shepherd"])
        ratio = normalise(shepherd, random_return, solved) / normalise(sb3, random_return, solved)
        rows.append((algorithm, case, random_return, solved, results, sb3, shepherd, ratio, seconds))
        print(f"  {row_text(rows[-1])}", flush=True)
    print()
    print("| algorithm | env | steps | random | solved | SB3 learn() per seed | Shepherd per seed | SB3 median "
          "| Shepherd median | ratio (normalised) | time SB3 / Shepherd |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(row_text(row))
    return 0 if all(row[7] >= 0.9 for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
