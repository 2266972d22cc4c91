"""Environments with roles (issue 46): what the roles cost. Env steps per second of a two-role environment with
alternate turns over HTTP (one role acts per request, both roles played by one PPO agent) against one ordinary
single-env session of the same agent, in one run, on one server (``run.py`` in its own process), one client
each, measured in turn (``--rounds`` times, alternating, the medians printed with their ratio).

Observations are random vectors of CartPole's shape, every reward 1, an episode every ``--episode`` steps; the
agent learns (PPO, n_steps 256) as it would from a real env, so both figures include its updates.

    python benchmarks/roles.py                      # the figures in docs/how-to/multi-agent.md
    python benchmarks/roles.py --steps 500 --rounds 1
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import Shepherd, connect, post  # noqa: E402

PRESET = """
owner: bench
agents:
  - {name: pole, algorithm: PPO, observation_space: [[4], -inf, inf], action_space: 2,
     parameters: {n_steps: 256, n_envs: 2, batch_size: 64, n_epochs: 4, seed: 0, policy_kwargs: {net_arch: [64, 64]}}}
schedule: {steps_between_evaluation_periods: 1000000000, evaluation_episodes: 1}
environments:
  - {name: duel, roles: {first: pole, second: pole}, turns: alternate}
"""


def obs(rng: random.Random) -> list[float]:
    return [rng.uniform(-1, 1) for _ in range(4)]


def single(url: str, key: str, steps: int, episode: int, rng: random.Random) -> float:
    """Env steps per second of one single-env session."""
    connection = connect(url)
    session = post(connection, "/shepherd/login_user/", {"apikey": key})["session_key"]
    started = time.perf_counter()
    post(connection, "/shepherd/env/", {"session_key": session, "obs": obs(rng), "reward": 0.0, "done": False})
    for step in range(1, steps):
        done = step % episode == 0
        post(connection, "/shepherd/env/", {"session_key": session, "obs": obs(rng), "reward": 1.0, "done": done})
        if done:
            post(connection, "/shepherd/env/", {"session_key": session, "obs": obs(rng), "reward": 0.0,
                                                "done": False})
    elapsed = time.perf_counter() - started
    post(connection, "/shepherd/logout/", {"session_key": session})
    connection.close()
    return steps / elapsed


def duel(url: str, key: str, steps: int, episode: int, rng: random.Random) -> float:
    """Env steps per second of one session of the two-role environment (a step: one role acts)."""
    connection = connect(url)
    session = post(connection, "/shepherd/login_user/", {"apikey": key})["session_key"]
    roles = ("first", "second")
    started = time.perf_counter()
    for step in range(steps):
        role = roles[step % 2]
        if step and step % episode == 0:  # both roles end, the next step begins the next episode
            post(connection, "/shepherd/env/", {"session_key": session, "obs": {r: obs(rng) for r in roles},
                                                "reward": {r: 1.0 for r in roles},
                                                "terminated": {r: True for r in roles}})
            role = "first"
        post(connection, "/shepherd/env/", {"session_key": session, "obs": {role: obs(rng)},
                                            "reward": {role: 1.0}})
    elapsed = time.perf_counter() - started
    post(connection, "/shepherd/logout/", {"session_key": session})
    connection.close()
    return steps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3000, help="env steps per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--episode", type=int, default=200, help="steps per episode")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        preset = Path(folder) / "duel.yaml"
        preset.write_text(PRESET)
        server = Shepherd(preset, Path(folder) / "data")
        try:
            text = "".join(server.lines)
            import re

            environment_key = re.search(r"API key for environment duel \(.*\): (\S+)", text).group(1)
            rng = random.Random(0)
            figures: dict[str, list[float]] = {"single": [], "roles": []}
            for _ in range(args.rounds):
                figures["single"].append(single(server.url, server.keys["pole"], args.steps, args.episode, rng))
                figures["roles"].append(duel(server.url, environment_key, args.steps, args.episode, rng))
        finally:
            server.stop()
    one, two = statistics.median(figures["single"]), statistics.median(figures["roles"])
    print(f"single-env session:           {one:8.0f} env steps/s  (rounds: {', '.join(f'{x:.0f}' for x in figures['single'])})")
    print(f"two-role alternate env:       {two:8.0f} env steps/s  (rounds: {', '.join(f'{x:.0f}' for x in figures['roles'])})")
    print(f"roles / single:               {two / one:8.2f}")


if __name__ == "__main__":
    main()
