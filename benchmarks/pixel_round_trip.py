#!/usr/bin/env python
"""Issue 47's greedy round trip: one 84x84x4 uint8 observation as a binary body (docs/protocol.md "Binary tensors")
through the server to a CnnPolicy agent's greedy step, against an echo server answering the same bytes back.

    .venv/bin/python benchmarks/pixel_round_trip.py                     # about two minutes on 2 cores
    .venv/bin/python benchmarks/pixel_round_trip.py --steps 500 --rounds 5

One client, one kept-alive connection per case, wall time per request (send the body, read the whole reply),
p50 of each round, the median of the rounds' p50s; the cases' order alternates between rounds. Cases:

- echo: ``benchmarks/echo_server.py --json raw`` (aiohttp; it answers the 28 KB body's bytes as they came);
- head: ``run.py -p benchmarks/presets/pixels_cnn.py --front-ends 1``, an evaluate-mode session on the head's
  private port (no front end in between): the greedy step of the fresh CnnPolicy (NatureCNN, 6 actions)
  answered from the agent's greedy ONNX file with onnxruntime on a greedy thread (`shepherd.agents.onnx_greedy`;
  before it, by the learner's torch forward on its thread, which still answers the first steps);
- front end: the same server's public port, an evaluate-mode session whose steps the front end answers from
  the agent's greedy ONNX file with onnxruntime (docs/front-ends.md) and the head records.

Also, in the same rounds: the head learner's forward batches and their mean time during the head case (its
``/metrics``, ``shepherd_act_latency_seconds`` part ``forward``: none when the greedy file answers every step),
and, in this process on one thread, one frame's torch forward and onnxruntime's on the exported file, so that what
is not the CNN can be read off (p50 minus the forward that answered). Prints each figure with the load average
(``os.getloadavg``) at its round, and the ratios to echo.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, Echo, Shepherd, connect, metrics  # noqa: E402
from shepherd.client.tensors import HEADER, encode  # noqa: E402
from shepherd.storage import read_server_file  # noqa: E402

PRESET = ROOT / "benchmarks" / "presets" / "pixels_cnn.py"
SNAPSHOT_HEADER = "X-Shepherd-Snapshot"


def frame() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (84, 84, 4), dtype=np.uint8)


def login(url: str, key: str) -> str:
    connection = connect(url)
    connection.request("POST", "/shepherd/login_user/", json.dumps({"apikey": key, "mode": "evaluate"}),
                       {"Content-Type": "application/json"})
    session = json.loads(connection.getresponse().read())["session_key"]
    connection.close()
    return session


def timed(url: str, body: bytes, length: int, steps: int, snapshot: bool | None) -> list[float]:
    """Seconds per request of ``steps`` requests on one connection (after a warm-up); ``snapshot``: whether every
    reply must (True) or must not (False) come from a front end's snapshot (None: an echo)."""
    connection = connect(url)
    headers = {"Content-Type": "application/octet-stream", HEADER: str(length)}
    times = []
    try:
        for index in range(steps + 30):
            started = time.perf_counter()
            connection.request("POST", "/shepherd/env/", body, headers)
            response = connection.getresponse()
            reply = response.read()
            elapsed = time.perf_counter() - started
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status}: {reply[:200]!r}")
            if index >= 30:  # the first ones warm up (a snapshot's fetch, the learner's publication)
                if snapshot is not None and (response.getheader(SNAPSHOT_HEADER) is not None) != snapshot:
                    raise RuntimeError(f"a reply {'not ' if snapshot else ''}answered from a snapshot")
                times.append(elapsed)
    finally:
        connection.close()
    return times


def forward_sides() -> dict[str, Callable[[], None]]:
    """One frame's greedy action, in this process on one thread: torch (the learner's way) and onnxruntime (the
    front end's), on the same fresh policy."""
    import onnxruntime as ort
    import torch as th

    from shepherd.agents import build_learner
    from shepherd.agents.export.export import export_onnx
    from shepherd.wire.spaces import parse_space

    th.set_num_threads(1)
    learner = build_learner("PPO", "eyes", parse_space(["Image", [84, 84, 4]]), parse_space(6), {"seed": 0}, None)
    adapter = learner.algorithm
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(export_onnx(adapter, "eyes", "PPO"), options, providers=["CPUExecutionProvider"])
    frames = frame()[None]
    policy = adapter.model.policy

    def torch_action() -> None:
        with th.no_grad():
            policy._predict(th.as_tensor(np.moveaxis(frames, -1, -3)), deterministic=True)

    def onnx_action() -> None:
        session.run(["action"], {"observation": frames})

    return {"torch forward (here)": torch_action, "onnxruntime forward (here)": onnx_action}


def forward_times(act: Callable[[], None], calls: int) -> list[float]:
    for _ in range(10):
        act()
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        act()
        times.append(time.perf_counter() - started)
    return times


def head_forward(url: str) -> tuple[float, float]:
    """The head's learner's forward seconds and batches so far (/metrics, ``shepherd_act_latency_seconds``'s
    ``forward`` part: each batch's processing on the learner's thread)."""
    figures = metrics(url)
    return (figures.get("shepherd_act_latency_seconds_sum:forward", 0.0),
            figures.get("shepherd_act_latency_seconds_count:forward", 0.0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--steps", type=int, default=300, help="requests a case a round (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds, alternating the order (default %(default)s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        echo = Echo("raw")
        shepherd = Shepherd(PRESET, Path(folder) / "data", "--front-ends", "1", "--rate-limit", "0",
                            "--max-body", str(1 << 20))
        try:
            private = read_server_file(Path(folder) / "data").url
            cases = {}
            for name, url, snapshot in (("echo", echo.url, None), ("head", private, False),
                                        ("front end (onnxruntime)", shepherd.url, True)):
                key = "k" * 43 if snapshot is None else login(url, shepherd.keys["eyes"])
                body, length = encode({"session_key": key, "obs": frame(), "reward": 0.0, "done": False})
                cases[name] = (url, body, length, snapshot)
            print(f"body: {len(cases['echo'][1]):,} bytes (JSON header {cases['echo'][2]} bytes)")
            sides = forward_sides()
            names = [*cases, *sides]
            p50s: dict[str, list[float]] = {name: [] for name in names}
            loads: dict[str, list[float]] = {name: [] for name in names}
            learner_forward: list[float] = []  # the head's mean forward per step during the head case, by round
            learner_batches: list[float] = []  # the head learner's forward batches during the head case, by round
            for round_ in range(args.rounds):
                for name in (names if round_ % 2 == 0 else names[::-1]):
                    if name in sides:
                        times = forward_times(sides[name], args.steps)
                    else:
                        url, body, length, snapshot = cases[name]
                        before = head_forward(private)
                        times = timed(url, body, length, args.steps, snapshot)
                        if snapshot is False:
                            after = head_forward(private)
                            learner_forward.append((after[0] - before[0]) / max(1.0, after[1] - before[1]))
                            learner_batches.append(after[1] - before[1])
                    p50s[name].append(statistics.median(times))
                    loads[name].append(os.getloadavg()[0])
                print(f"round {round_ + 1}: " + ", ".join(f"{name} {p50s[name][-1] * 1e3:.2f} ms" for name in names)
                      + f", the learner's forward {learner_forward[-1] * 1e3:.2f} ms (mean of "
                      f"{learner_batches[-1]:.0f} batches)", flush=True)
        finally:
            shepherd.stop()
            echo.stop()
    p50 = {name: statistics.median(values) for name, values in p50s.items()}
    print(f"\np50, median of {args.rounds} rounds of {args.steps} (load average at the rounds):")
    for name, value in p50.items():
        print(f"  {name:<28} {value * 1e3:7.2f} ms   {value / p50['echo']:5.2f}x echo   "
              f"(load {min(loads[name]):.2f}-{max(loads[name]):.2f})")
    head, front = p50["head"], p50["front end (onnxruntime)"]
    onnx = p50["onnxruntime forward (here)"]
    batches = statistics.median(learner_batches)
    if batches < 0.1 * args.steps:  # (nearly) every step from the greedy file: its forward is onnxruntime's
        forward, which = onnx, "onnxruntime forward here"
        print(f"  the head's steps answered by its greedy file (learner forward batches, median a round: {batches:.0f})")
    else:
        forward, which = statistics.median(learner_forward), "the learner's forward"
        print(f"  the head learner's forward, mean per step during the head case (its /metrics): {forward * 1e3:.2f} ms "
              f"({batches:.0f} batches a round)")
    print(f"head without its forward (p50 - {which}): {(head - forward) * 1e3:.2f} ms = "
          f"{(head - forward) / p50['echo']:.2f}x echo")
    print(f"front end without the forward (p50 - onnxruntime forward here): {(front - onnx) * 1e3:.2f} ms = "
          f"{(front - onnx) / p50['echo']:.2f}x echo")
    return 0


if __name__ == "__main__":
    sys.exit(main())
