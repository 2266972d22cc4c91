#!/usr/bin/env python
"""The head's CPU per env step of a client-acting upload (issue 35: <= 5 us), its parts measured alone.

    .venv/bin/python benchmarks/upload_parse.py                  # a few seconds
    .venv/bin/python benchmarks/upload_parse.py --rounds 10 --envs 8 --steps 128

Four uploads of ``--envs`` envs x ``--steps`` steps, as a client sends them (JSON bytes, floats written by
Python's ``json``, episodes ending now and then with their ``final_obs``): CartPole (``Box(4)``
observations, ``Discrete(2)`` samples), the same with ``Discrete(5)`` samples and every step's action mask
(a MaskablePPO agent's), the same with ``Dict`` observations, and an image-ish one (``Box(16, 16, 3)``
observations, ``Box(2)`` samples, unbounded as an on-policy Gaussian's); then each again as a binary body (issue
47: the JSON header and raw tensors, every column one tensor, docs/protocol.md "Binary tensors"), and an
Atari-sized one (84x84x4 uint8 frames, 16 steps a block) both ways. For each, in one sitting, rounds alternating
their order:

- ``decode``: ``orjson.loads`` of the body (``parse_object``, what the route does first; a binary body's
  ``parse_object`` with its header length, `shepherd.wire.tensors.decode`);
- ``checked``: the per-value checker alone (`shepherd.wire.experience.checked_experience`: the whole parse
  before numpy columns, kept to name the bad value of a refused upload; left out for the frames);
- ``parse``: `parse_experience` (numpy columns, the checker only for a refused upload);
- ``digest``: `Experience.digest` (a retry's content check, once per upload);
- ``record``: the level's accounting of an accepted block (`ClientActingLevel._record`: every env step
  counted with the agent's schedule, episodes' returns), with a stand-in host that does what
  `AgentRuntime.count_step` does per step.

Prints microseconds per env step (median over rounds) and, per upload, the head's total without and with
the per-value checker, and each binary case's total as a ratio of its JSON case's, measured in the same run. The route's other work (aiohttp, the session's seq rules, the learner's queue, the
reply) is per upload, not per env step; ``benchmarks/acting.py --only head`` measures the head's thread
over a served run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import orjson
from gymnasium import spaces

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shepherd.client.tensors import encode  # noqa: E402
from shepherd.level.client import ClientActingLevel  # noqa: E402
from shepherd.wire import parse_object  # noqa: E402
from shepherd.wire.experience import EXPERIENCE_FIELDS  # noqa: E402
from shepherd.wire.tensors import plain  # noqa: E402
from shepherd.level.episodes import Phase  # noqa: E402
from shepherd.wire.experience import ExperienceSpaces, checked_experience, parse_experience  # noqa: E402
from shepherd.wire.spaces import check_action_mask  # noqa: E402


def upload(obs_shape: tuple[int, ...], sample: spaces.Space, n: int, steps: int, seed: int = 0,
           masked: bool = False, keyed: bool = False) -> bytes:
    """An upload's body: T steps of N envs, an episode ending about every 40 steps of an env; with ``masked``
    (a ``Discrete`` sample space), each step's action mask, half the actions allowed, the sample among them;
    with ``keyed``, each observation an object ``{"pos": the observation, "flag": 0 or 1}`` (a ``Dict`` space)."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(steps + 1, n, *obs_shape)).astype(np.float32)
    ended = rng.random((steps, n)) < 1 / 40
    truncated = ended & (rng.random((steps, n)) < 0.3)
    finals = [[rng.normal(size=obs_shape).astype(np.float32).tolist() if ended[t, i] else None for i in range(n)]
              for t in range(steps)]
    samples = [[sample.sample().tolist() if isinstance(sample, spaces.Box) else int(sample.sample())
                for _ in range(n)] for _ in range(steps)]
    body = {"session_key": "k" * 32, "seq": 3, "policy_version": 7, "obs": obs.tolist(), "sample": samples,
            "reward": rng.normal(size=(steps, n)).tolist(), "terminated": (ended & ~truncated).tolist(),
            "truncated": truncated.tolist(), "final_obs": finals}
    if keyed:
        body["obs"] = [[{"pos": value, "flag": int(rng.integers(2))} for value in row] for row in body["obs"]]
        body["final_obs"] = [[None if value is None else {"pos": value, "flag": 0} for value in row]
                             for row in finals]
    if masked:
        masks = rng.random((steps + 1, n, int(sample.n))) < 0.5
        for t in range(steps):
            for i in range(n):
                masks[t, i, samples[t][i]] = True
        masks[steps, :, 0] = True
        body["action_mask"] = masks.tolist()
    return json.dumps(body).encode()


def binary(body: bytes, frames: bool = False) -> tuple[bytes, int]:
    """``body`` (an `upload`'s JSON) as a binary body: every column one tensor (observations float32, or uint8 for
    ``frames``; rewards float64; flags and masks booleans), each ``final_obs`` its own; a ``Dict`` space's
    observations stay JSON. Returns the body and its JSON's length."""
    data = json.loads(body)
    kind = np.uint8 if frames else np.float32
    keyed = isinstance(data["obs"][0][0], dict)
    data.update(sample=np.asarray(data["sample"]), reward=np.asarray(data["reward"], np.float64),
                terminated=np.asarray(data["terminated"], bool), truncated=np.asarray(data["truncated"], bool))
    if not keyed:
        data["obs"] = np.asarray(data["obs"], kind)
        data["final_obs"] = [[None if last is None else np.asarray(last, kind) for last in row]
                             for row in data["final_obs"]]
    if "action_mask" in data:
        data["action_mask"] = np.asarray(data["action_mask"], bool)
    if keyed:  # as ActingClient sends them: the JSON objects after the tensors (the decoder stops before them)
        data["obs"], data["final_obs"] = data.pop("obs"), data.pop("final_obs")
    return encode(data)


def frames_upload(n: int, steps: int, seed: int = 0) -> bytes:
    """An upload's JSON body of 84x84x4 uint8 frames (integers), ``Discrete(6)`` samples."""
    rng = np.random.default_rng(seed)
    shape = (84, 84, 4)
    ended = rng.random((steps, n)) < 1 / 40
    body = {"session_key": "k" * 32, "seq": 3, "policy_version": 7,
            "obs": rng.integers(0, 256, (steps + 1, n, *shape)).tolist(),
            "sample": rng.integers(0, 6, (steps, n)).tolist(), "reward": rng.normal(size=(steps, n)).tolist(),
            "terminated": ended.tolist(), "truncated": np.zeros((steps, n), bool).tolist(),
            "final_obs": [[rng.integers(0, 256, shape).tolist() if ended[t, i] else None for i in range(n)]
                          for t in range(steps)]}
    return json.dumps(body).encode()


class Host:
    """A stand-in for the agent's runtime: what `AgentRuntime.count_step` and `end_episode` do per call."""

    def __init__(self) -> None:
        self.steps = 0
        self.last_active = 0.0
        self.episodes = 0
        self.checkpoint_every = 10 ** 9
        self.learner = None

    def count_step(self, phase: Phase, steps: int = 1) -> None:
        self.last_active = time.time()
        self.steps += steps
        if self.steps >= self.checkpoint_every or time.monotonic() < 0:
            pass

    def end_episode(self, episode: Any, completed: bool) -> None:
        self.episodes += 1

    def next_config(self) -> None:
        return None


def per_step(work: Callable[[], Any], env_steps: int, repeat: int) -> float:
    """Microseconds per env step of ``work``, the best of ``repeat`` calls' CPU times."""
    times = []
    for _ in range(repeat):
        started = time.thread_time()
        work()
        times.append(time.thread_time() - started)
    return min(times) / env_steps * 1e6


def measure(name: str, body: bytes, checks: ExperienceSpaces, n: int, steps: int, repeat: int,
            length: int | None = None) -> dict[str, float]:
    data = orjson.loads(body) if length is None else parse_object(body, EXPERIENCE_FIELDS, length)
    experience = parse_experience(data, checks, n, steps)
    level = ClientActingLevel(1, n, Host())  # type: ignore[arg-type]
    level.phase = Phase.TRAIN
    level.episodes = [level._new_episode(i) for i in range(n)]
    env_steps = n * steps
    parts = {
        "decode": (lambda: orjson.loads(body)) if length is None else (
            lambda: parse_object(body, EXPERIENCE_FIELDS, length)),
        "checked": lambda: checked_experience(data if length is None else plain(data), checks, n, steps),
        "parse": lambda: parse_experience(data, checks, n, steps),
        "digest": experience.digest,
        "record": lambda: level._record(experience),
    }
    if name.startswith("frames"):
        del parts["checked"]  # seconds a block: it only words a refused upload
    return {part: per_step(work, env_steps, repeat) for part, work in parts.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5, help="calls per part a round (the best is kept)")
    args = parser.parse_args()
    n, steps = args.envs, args.steps
    box = spaces.Box(-np.inf, np.inf, (2,), np.float32)
    cases = {
        "cartpole": (upload((4,), spaces.Discrete(2), n, steps),
                     ExperienceSpaces(spaces.Box(-np.inf, np.inf, (4,), np.float32), spaces.Discrete(2))),
        "masked Discrete(5)": (upload((4,), spaces.Discrete(5), n, steps, masked=True),
                               ExperienceSpaces(spaces.Box(-np.inf, np.inf, (4,), np.float32), spaces.Discrete(5),
                                                spaces.Discrete(5), lambda value, space, where: check_action_mask(
                                                    space, value, where))),
        "Dict observations": (upload((4,), spaces.Discrete(2), n, steps, keyed=True),
                              ExperienceSpaces(spaces.Dict({"pos": spaces.Box(-np.inf, np.inf, (4,), np.float32),
                                                            "flag": spaces.Discrete(2)}), spaces.Discrete(2))),
        "image 16x16x3": (upload((16, 16, 3), box, n, steps),
                          ExperienceSpaces(spaces.Box(-np.inf, np.inf, (16, 16, 3), np.float32), box)),
    }
    lengths: dict[str, int | None] = {name: None for name in cases}
    for name in list(cases):
        body, checks = cases[name]
        cases[f"{name}, binary"] = (binary(body)[0], checks)
        lengths[f"{name}, binary"] = binary(body)[1]
    frame_steps = max(1, steps // 8)
    frames = frames_upload(n, frame_steps)
    frame_checks = ExperienceSpaces(spaces.Box(0, 255, (84, 84, 4), np.float32), spaces.Discrete(6))
    cases["frames 84x84x4"], lengths["frames 84x84x4"] = (frames, frame_checks), None
    cases["frames 84x84x4, binary"] = (binary(frames, frames=True)[0], frame_checks)
    lengths["frames 84x84x4, binary"] = binary(frames, frames=True)[1]
    blocks = {name: frame_steps if name.startswith("frames") else steps for name in cases}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in cases}
    for index in range(args.rounds):
        for name in (list(cases) if index % 2 == 0 else list(reversed(cases))):
            body, checks = cases[name]
            results[name].append(measure(name, body, checks, n, blocks[name], args.repeat, lengths[name]))
    print(f"us per env step, median of {args.rounds} rounds (best of {args.repeat} calls each); "
          f"uploads of {n} envs x {steps} steps (the frames: x {frame_steps} steps)")
    totals: dict[str, float] = {}
    for name, rounds in results.items():
        median = {part: statistics.median(r[part] for r in rounds) for part in rounds[0]}
        size = len(cases[name][0]) / (n * blocks[name])
        print(f"{name:14} ({size:.0f} bytes/env step): " + ", ".join(f"{p} {v:.2f}" for p, v in median.items()))
        fast = totals[name] = median["decode"] + median["parse"] + median["digest"] + median["record"]
        slow = f" (with the per-value checker: {median['decode'] + median['checked'] + median['digest'] + median['record']:.2f} us)" if "checked" in median else ""
        print(f"{'':14} decode + parse + digest + record: {fast:.2f} us{slow}")
    print("binary body / JSON body, head CPU per env step (same run):")
    for name in results:
        if name.endswith(", binary"):
            json_name = name.removesuffix(", binary")
            print(f"  {json_name:20} {totals[name]:8.2f} / {totals[json_name]:8.2f} us = "
                  f"{totals[name] / totals[json_name]:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
