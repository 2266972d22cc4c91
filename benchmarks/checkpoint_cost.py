#!/usr/bin/env python
"""What a checkpoint with a replay buffer costs (issue 48): its size and the time to write and to restore it,
against the same learner's checkpoint without its buffer (``checkpoint_replay_buffer: false``) in the same run.

    .venv/bin/python benchmarks/checkpoint_cost.py                 # DQN 1e5 and 1e6 (CartPole), SAC 1e6 (17-dim)
    .venv/bin/python benchmarks/checkpoint_cost.py --repeats 5 --folder /path/on/the/data/disk

Each case builds the learner as the server does (`build_learner`, the network of the preset's size), fills its
replay buffer to the brim with random transitions (SB3 pickles the whole preallocated buffer: the file's size is
that of ``buffer_size`` transitions however full it is), and writes its checkpoint on this thread as the
learner's thread does (`write_checkpoint`: the buffer beside the zip, fsynced, then the zip), ``--repeats``
times each way, alternately; then restores it into a fresh learner. Prints the medians and the ratios with/
without. A PPO case shows what an on-policy rollout filled in part adds to the zip. No network, no server.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from shepherd.agents import build_learner, checkpoint
from shepherd.agents.core import ActMode

CASES: dict[str, tuple[str, spaces.Space, spaces.Space, dict[str, Any]]] = {
    "DQN 1e5, CartPole (4)": ("DQN", spaces.Box(-np.inf, np.inf, (4,), np.float32), spaces.Discrete(2),
                              {"buffer_size": 100_000, "policy_kwargs": {"net_arch": [64, 64]}}),
    "DQN 1e6, CartPole (4)": ("DQN", spaces.Box(-np.inf, np.inf, (4,), np.float32), spaces.Discrete(2),
                              {"buffer_size": 1_000_000, "policy_kwargs": {"net_arch": [64, 64]}}),
    "SAC 1e6, 17-dim obs, 6 actions": ("SAC", spaces.Box(-np.inf, np.inf, (17,), np.float32),
                                       spaces.Box(-1, 1, (6,), np.float32),
                                       {"buffer_size": 1_000_000, "policy_kwargs": {"net_arch": [256, 256]}}),
}


def fill(model: Any) -> None:
    """Every row of the replay buffer written (random values: nothing compresses)."""
    buffer, rng = model.replay_buffer, np.random.default_rng(0)
    for name in ("observations", "next_observations", "actions", "rewards"):
        array = getattr(buffer, name)
        array[...] = rng.standard_normal(array.shape).astype(array.dtype)
    buffer.full, buffer.pos = True, 0


def measure(algorithm: str, obs: spaces.Space, act: spaces.Space, params: dict[str, Any], repeats: int,
            folder: Path) -> dict[str, float]:
    learners = {kept: build_learner(algorithm, "bench", obs, act, {**params, "seed": 0,
                                                                    "checkpoint_replay_buffer": kept}, None)
                for kept in (True, False)}
    fill(learners[True].model)
    fill(learners[False].model)
    times: dict[bool, list[float]] = {True: [], False: []}
    paths = {kept: folder / ("with" if kept else "without") / checkpoint.MODEL_FILE for kept in (True, False)}
    for _ in range(repeats):
        for kept in (True, False):  # alternately: both see the machine's load of the moment
            started = time.perf_counter()
            learners[kept].algorithm.write_checkpoint(paths[kept], {})
            times[kept].append(time.perf_counter() - started)
    fresh = build_learner(algorithm, "bench", obs, act, {**params, "seed": 1}, None)
    started = time.perf_counter()
    fresh.restore(paths[True])
    restore = time.perf_counter() - started
    assert fresh.model.replay_buffer.full, "the buffer did not come back"
    buffer_file = checkpoint.replay_buffer_path(paths[True])
    return {"zip MB": paths[True].stat().st_size / 1e6, "buffer MB": buffer_file.stat().st_size / 1e6,
            "write s": statistics.median(times[True]), "write without s": statistics.median(times[False]),
            "restore s": restore}


def rollout_case(folder: Path) -> tuple[float, float]:
    """PPO (CartPole, n_steps 2048, n_envs 8): the zip's size with an empty rollout and with one filled in half."""
    obs, act = spaces.Box(-np.inf, np.inf, (4,), np.float32), spaces.Discrete(2)
    learner = build_learner("PPO", "bench", obs, act, {"n_steps": 2048, "n_envs": 8, "seed": 0}, None)
    empty = folder / "ppo-empty" / checkpoint.MODEL_FILE
    learner.algorithm.write_checkpoint(empty, {})
    learner.start()
    try:
        for actor in range(8):
            learner.begin_episode(actor, np.zeros(4, np.float32), ActMode.EXPLORE).result(10)
            for _ in range(1024):
                learner.step(actor, 1.0, np.zeros(4, np.float32), ActMode.EXPLORE).result(10)
        half = folder / "ppo-half" / checkpoint.MODEL_FILE
        learner.checkpoint(half, {}).result(60)
    finally:
        learner.close()
    return empty.stat().st_size / 1e6, half.stat().st_size / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--folder", type=Path, default=None, help="where to write (default: a temporary folder)")
    parser.add_argument("--only", choices=["DQN", "SAC", "PPO"], nargs="*", default=None)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="shepherd-checkpoints-", dir=args.folder))
    print(f"writing in {folder}; {args.repeats} checkpoints each way, medians")
    try:
        print(f"{'case':32} {'zip MB':>7} {'buffer MB':>10} {'write s':>8} {'without s':>10} {'ratio':>6} "
              f"{'restore s':>10}")
        for name, (algorithm, obs, act, params) in CASES.items():
            if args.only and algorithm not in args.only:
                continue
            found = measure(algorithm, obs, act, params, args.repeats, folder / algorithm)
            ratio = found["write s"] / found["write without s"]
            print(f"{name:32} {found['zip MB']:7.2f} {found['buffer MB']:10.1f} {found['write s']:8.3f} "
                  f"{found['write without s']:10.3f} {ratio:5.0f}x {found['restore s']:10.3f}", flush=True)
        if not args.only or "PPO" in args.only:
            empty, half = rollout_case(folder)
            print(f"PPO n_steps 2048 x 8 (CartPole): the zip {empty:.2f} MB with an empty rollout, {half:.2f} MB "
                  "with one filled in half")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
