#!/usr/bin/env python
"""Issue 47: Atari env steps per second through a Shepherd vector client of 8 envs, greedy, against the same 8 envs
stepped alone (no target: reported).

    pip install -e '.[pixels]'        # ale-py (ROMs bundled), opencv for AtariPreprocessing, minigrid
    .venv/bin/python benchmarks/atari_vector.py                     # about four minutes on 2 cores
    .venv/bin/python benchmarks/atari_vector.py --env ALE/Breakout-v5 --steps 200 --rounds 2

The envs: ``gym.make(ENV, frameskip=1)`` wrapped in ``AtariPreprocessing`` (frame skip 4, 84x84 grey, noop
reset) and ``FrameStackObservation(4)``: a 4 x 84 x 84 uint8 observation, in one synchronous vector env that
resets an ended env in the same step (as the protocol's vector steps do). The agent
(benchmarks/presets/atari_cnn.py) is a fresh PPO CnnPolicy, ``["Image", [84, 84, 4], "channels_first"]``. Cases,
``--steps`` vector steps each, ``--rounds`` rounds in alternating order:

- alone: the 8 envs stepped with a fixed action, nothing else (the env's own cost);
- head: a `VectorClient` (binary tensors: 8 frames = 226 KB a request) in an evaluate-mode session on the head's
  private port: the 8 actions are the learner's, one torch forward of the batch;
- front end: the same on the public port of ``--front-ends 1``: the front end answers from the agent's greedy
  ONNX file (onnxruntime), the head records.

Prints env steps/s (8 x vector steps / wall seconds) of each case, the ratios to alone, and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, Shepherd  # noqa: E402
from shepherd.storage import read_server_file  # noqa: E402

PRESET = ROOT / "benchmarks" / "presets" / "atari_cnn.py"
N_ENVS = 8


def make_envs(env_id: str) -> Any:
    import ale_py
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode, SyncVectorEnv
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    gym.register_envs(ale_py)

    def one() -> Any:
        return FrameStackObservation(AtariPreprocessing(gym.make(env_id, frameskip=1), frame_skip=4), 4)

    return SyncVectorEnv([one] * N_ENVS, autoreset_mode=AutoresetMode.SAME_STEP)


def alone(envs: Any, steps: int) -> float:
    """Seconds for ``steps`` vector steps of the envs alone (action 0, NOOP)."""
    import numpy as np

    envs.reset(seed=0)
    actions = np.zeros(N_ENVS, dtype=np.int64)
    started = time.perf_counter()
    for _ in range(steps):
        envs.step(actions)
    return time.perf_counter() - started


def through(url: str, key: str) -> Callable[[Any, int], float]:
    """A case: seconds for ``steps`` vector steps of the envs driven by a greedy vector session at ``url``."""

    def run(envs: Any, steps: int) -> float:
        import numpy as np

        from shepherd.client import VectorClient, first_vector_step, gymnasium_vector_step

        client = VectorClient(url, key, n_envs=N_ENVS, timeout=120)
        client.login(mode="evaluate")
        try:
            obs, _ = envs.reset(seed=0)
            body = first_vector_step(obs, N_ENVS)
            for _ in range(5):  # warm: the learner publishes, the front end fetches its snapshot
                actions = client.step(**body)
                body = gymnasium_vector_step(*envs.step(np.asarray(actions, dtype=np.int64)))
            time.sleep(1.0)
            started = time.perf_counter()
            for _ in range(steps):
                actions = client.step(**body)
                body = gymnasium_vector_step(*envs.step(np.asarray(actions, dtype=np.int64)))
            return time.perf_counter() - started
        finally:
            client.logout()
            client.close()

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--steps", type=int, default=300, help="vector steps a case a round (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, alternating the order (default %(default)s)")
    args = parser.parse_args()
    envs = make_envs(args.env)
    print(f"{args.env}: {N_ENVS} envs, observation {envs.single_observation_space.shape} "
          f"{envs.single_observation_space.dtype}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        shepherd = Shepherd(PRESET, Path(folder) / "data", "--front-ends", "1", "--rate-limit", "0",
                            "--max-body", str(4 << 20))
        try:
            private = read_server_file(Path(folder) / "data").url
            key = shepherd.keys["atari"]
            cases: dict[str, Callable[[Any, int], float]] = {
                "alone": alone, "head (torch, learner)": through(private, key),
                "front end (onnxruntime)": through(shepherd.url, key)}
            rates: dict[str, list[float]] = {name: [] for name in cases}
            loads: dict[str, list[float]] = {name: [] for name in cases}
            for round_ in range(args.rounds):
                for name in (list(cases) if round_ % 2 == 0 else list(cases)[::-1]):
                    seconds = cases[name](envs, args.steps)
                    rates[name].append(N_ENVS * args.steps / seconds)
                    loads[name].append(os.getloadavg()[0])
                print(f"round {round_ + 1}: " + ", ".join(f"{name} {rates[name][-1]:.0f}" for name in cases)
                      + " env steps/s", flush=True)
        finally:
            shepherd.stop()
            envs.close()
    rate = {name: statistics.median(values) for name, values in rates.items()}
    print(f"\nenv steps/s, median of {args.rounds} rounds of {args.steps} vector steps of {N_ENVS} envs:")
    for name, value in rate.items():
        print(f"  {name:<26} {value:7.0f}   {value / rate['alone']:5.2f}x alone   "
              f"(load {min(loads[name]):.2f}-{max(loads[name]):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
