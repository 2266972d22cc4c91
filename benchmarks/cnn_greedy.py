#!/usr/bin/env python
"""An image agent's greedy action, one observation at a time: the learner's torch forward pass (how Shepherd
answers an image agent's greedy steps: its numpy snapshot has no convolutions) against onnxruntime running the
agent's exported file (the deploy server's and the acting client's way).

    .venv/bin/python benchmarks/cnn_greedy.py                          # PPO CnnPolicy, 84x84x4, 6 actions
    .venv/bin/python benchmarks/cnn_greedy.py --shape 36 36 1 --batch 8

Both sides on one thread (as the learner's torch is), the same fresh policy and the same uint8 frames, timed
alternately over ``--rounds`` rounds of ``--calls`` calls. Prints each side's median time per call and the
ratio torch / onnxruntime (above 1: onnxruntime faster), and checks that both chose the same actions.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", type=int, nargs=3, default=[84, 84, 4], metavar=("H", "W", "C"))
    parser.add_argument("--batch", type=int, default=1, help="observations per call (default %(default)s)")
    parser.add_argument("--calls", type=int, default=300, help="calls a round (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, alternating the sides (default %(default)s)")
    args = parser.parse_args()

    import numpy as np
    import onnxruntime as ort
    import torch as th

    from shepherd.agents import build_learner
    from shepherd.agents.export.export import export_onnx
    from shepherd.wire.spaces import parse_space

    th.set_num_threads(1)
    learner = build_learner("PPO", "eyes", parse_space(["Image", list(args.shape)]), parse_space(6), {"seed": 0}, None)
    adapter = learner.algorithm
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(export_onnx(adapter, "eyes", "PPO"), options, providers=["CPUExecutionProvider"])
    frames = np.random.default_rng(0).integers(0, 256, (args.batch, *args.shape)).astype(np.uint8)
    policy = adapter.model.policy

    def torch_actions() -> np.ndarray:
        with th.no_grad():  # what the learner does: the layout turned (VecTransposeImage), then SB3's forward
            return policy._predict(th.as_tensor(np.moveaxis(frames, -1, -3)), deterministic=True).numpy()

    def onnx_actions() -> np.ndarray:
        return session.run(["action"], {"observation": frames})[0]

    assert np.array_equal(torch_actions(), onnx_actions()), "the two sides chose different actions"
    sides = {"torch": torch_actions, "onnxruntime": onnx_actions}
    times: dict[str, list[float]] = {name: [] for name in sides}
    for round_ in range(args.rounds):
        for name in (list(sides) if round_ % 2 == 0 else list(sides)[::-1]):
            act = sides[name]
            for _ in range(20):
                act()
            start = time.perf_counter()
            for _ in range(args.calls):
                act()
            times[name].append((time.perf_counter() - start) / args.calls)
    medians = {name: statistics.median(found) for name, found in times.items()}
    for name, median in medians.items():
        print(f"{name:<12} {median * 1e3:8.3f} ms a call of {args.batch} x {args.shape}")
    print(f"torch / onnxruntime: {medians['torch'] / medians['onnxruntime']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
