#!/usr/bin/env python
"""What binary tensors save per step (issue 47, docs/protocol.md "Binary tensors"), each case beside its baseline
in the same run: one 84x84x4 uint8 observation sent as a binary body, as JSON, and a CartPole step as JSON; and the
same binary body to an image agent (a CnnPolicy).

    .venv/bin/python benchmarks/binary_steps.py                  # about a minute on 2 cores
    .venv/bin/python benchmarks/binary_steps.py --steps 2000 --rounds 5

- edge: the wire's work per step in this process, what the server does with a body before the graph: the body
  read (`parse_object`: orjson, or the binary decode) and checked (`wire.parse_step` against the space, the
  observation converted to float32), CPU time per step (`time.thread_time`, the best of --rounds);
- server: the learning server's process CPU per step (``run.py -p benchmarks/presets/pixels.py``, its /proc
  times), one client on one keep-alive connection stepping an evaluate-mode session as fast as it can, --rounds
  rounds alternating the cases' order, the median kept. It includes aiohttp, the session, the episode's
  bookkeeping and the greedy policy's forward pass, which for the frames is SB3's default MLP over 28,224 inputs
  (its first layer alone 1.8M weights); for "84x84x4 Image binary" (``["Image", [84, 84, 4]]``) a CnnPolicy's
  (NatureCNN, answered from its greedy ONNX file with onnxruntime once loaded: `shepherd.agents.onnx_greedy`);
- first layer: the frames' policy's first layer alone (28,224 x 64 float32 weights, numpy), the part of the
  server's figure that is not the wire's;
- bytes: the body's size each way.

Prints microseconds per step and the ratios. Everything runs on 127.0.0.1 and stops by itself.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, Shepherd, connect  # noqa: E402
from shepherd.client.tensors import HEADER, encode  # noqa: E402
from shepherd.wire import STEP_FIELDS, parse_object, parse_step  # noqa: E402
from shepherd.wire.spaces import parse_space  # noqa: E402

PRESET = ROOT / "benchmarks" / "presets" / "pixels.py"
POLE = [0.01, -0.02, 0.03, 0.04]


def frame(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (84, 84, 4), dtype=np.uint8)


def bodies(key: str) -> dict[str, tuple[bytes, int | None]]:
    """The three cases' bodies (and JSON lengths) of a session ``key``'s step."""
    image = frame(0)
    step = {"session_key": key, "reward": 1.0, "done": False, "info": {}}
    return {"CartPole JSON": (json.dumps({**step, "obs": POLE}).encode(), None),
            "84x84x4 binary": encode({**step, "obs": image}),
            "84x84x4 JSON": (json.dumps({**step, "obs": image.tolist()}).encode(), None),
            "84x84x4 Image binary": encode({**step, "obs": image})}


def edge(rounds: int, steps: int) -> dict[str, float]:
    """us per step of parse_object + parse_step, the best of ``rounds``."""
    spaces = {"CartPole JSON": parse_space([[4], "-inf", "inf"]), "84x84x4 binary": parse_space([[84, 84, 4], 0, 255]),
              "84x84x4 JSON": parse_space([[84, 84, 4], 0, 255]), "84x84x4 Image binary": parse_space(["Image", [84, 84, 4]])}

    def no_mask(*args: Any) -> Any:
        raise AssertionError

    best: dict[str, float] = {}
    for name, (body, length) in bodies("k" * 43).items():
        times = []
        for _ in range(rounds):
            started = time.thread_time()
            for _ in range(steps):
                parse_step(parse_object(body, STEP_FIELDS, length), spaces[name], None, no_mask)
            times.append((time.thread_time() - started) / steps * 1e6)
        best[name] = min(times)
    return best


def first_layer(rounds: int, steps: int) -> float:
    """us per step of the frames' policy's first layer alone, as the greedy numpy snapshot computes it (one
    observation times SB3's default MLP's 28,224 x 64 float32 weights, tanh): what the server's figure holds
    beyond the wire's."""
    rng = np.random.default_rng(0)
    weights, bias = rng.normal(size=(84 * 84 * 4, 64)).astype(np.float32), np.zeros(64, np.float32)
    obs = frame(0).astype(np.float32).reshape(1, -1)
    times = []
    for _ in range(rounds):
        started = time.thread_time()
        for _ in range(steps):
            np.tanh(obs @ weights + bias)
        times.append((time.thread_time() - started) / steps * 1e6)
    return min(times)


def post(connection: http.client.HTTPConnection, body: bytes, length: int | None) -> Any:
    headers = {"Content-Type": "application/json"} if length is None else {
        "Content-Type": "application/octet-stream", HEADER: str(length)}
    connection.request("POST", "/shepherd/env/", body, headers)
    response = connection.getresponse()
    reply = response.read()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {reply[:200]!r}")
    return reply


def login(url: str, key: str) -> str:
    connection = connect(url)
    connection.request("POST", "/shepherd/login_user/", json.dumps({"apikey": key, "mode": "evaluate"}),
                       {"Content-Type": "application/json"})
    session = json.loads(connection.getresponse().read())["session_key"]
    connection.close()
    return session


def server(rounds: int, steps: int) -> dict[str, float]:
    """Server CPU us per step of each case, the median over ``rounds``."""
    with tempfile.TemporaryDirectory() as folder:
        shepherd = Shepherd(PRESET, Path(folder) / "data", "--rate-limit", "0", "--max-body", str(1 << 20))
        try:
            cases: dict[str, tuple[bytes, int | None]] = {}
            for name in ("CartPole JSON", "84x84x4 binary", "84x84x4 JSON", "84x84x4 Image binary"):
                agent = "pole" if name.startswith("CartPole") else "eyes" if "Image" in name else "frames"
                cases[name] = bodies(login(shepherd.url, shepherd.keys[agent]))[name]
            results: dict[str, list[float]] = {name: [] for name in cases}
            for index in range(rounds):
                for name in (list(cases) if index % 2 == 0 else list(reversed(cases))):
                    body, length = cases[name]
                    connection = connect(shepherd.url)
                    for warm in range(40):  # the first greedy steps ask the learner to publish its weights (an
                        post(connection, body, length)  # image agent's: to build its greedy file, then loaded)
                        if warm == 19:
                            time.sleep(0.5)
                    time.sleep(0.2)
                    before = shepherd.cpu_seconds()
                    for _ in range(steps):
                        post(connection, body, length)
                    results[name].append((shepherd.cpu_seconds() - before) / steps * 1e6)
                    connection.close()
            return {name: statistics.median(values) for name, values in results.items()}
        finally:
            shepherd.stop()


def report(title: str, figures: dict[str, float]) -> None:
    base, binary, text = figures["CartPole JSON"], figures["84x84x4 binary"], figures["84x84x4 JSON"]
    print(f"{title}: " + ", ".join(f"{name} {value:.1f} us" for name, value in figures.items()))
    print(f"  84x84x4 binary / CartPole JSON = {binary / base:.2f}x;  84x84x4 JSON / binary = {text / binary:.1f}x;  "
          f"84x84x4 Image binary / CartPole JSON = {figures['84x84x4 Image binary'] / base:.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--steps", type=int, default=500, help="steps a case a round (edge: 4x as many)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-server", action="store_true", help="the edge figures only")
    args = parser.parse_args()
    sizes = {name: len(body) for name, (body, _) in bodies("k" * 43).items()}
    print("body bytes: " + ", ".join(f"{name} {size:,}" for name, size in sizes.items()))
    report("edge (parse + check) CPU per step", edge(args.rounds, 4 * args.steps))
    print(f"the frames' policy's first layer alone (numpy, one observation): {first_layer(args.rounds, args.steps):.1f} us")
    if not args.no_server:
        report("server process CPU per evaluate-mode step", server(args.rounds, args.steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
