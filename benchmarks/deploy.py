#!/usr/bin/env python
"""The exported policy's speed and the deploy server's cost, each beside its baseline in the same run.

    .venv/bin/python benchmarks/deploy.py                 # about 2 minutes on 2 cores
    .venv/bin/python benchmarks/deploy.py --seconds 10    # longer load runs

- forward: `Policy.act` on one observation (a JSON list, checked as the server checks it) and
  `Policy.act_batch` on 64, against SB3's `predict()` (deterministic) of the same network on one and on 64,
  both on one thread. The policy is SB3's CartPole PPO MlpPolicy (64x64 tanh, its initial weights) of an
  agent's learner, exported by `shepherd.agents.export.export` (what `run.py agents export --format onnx` writes);
  its actions are checked equal to predict()'s on 1,000 observations first.
- round trip (P1's method, benchmarks/perf.py): one wrk connection with an evaluate-mode session steps a
  CartPole observation as fast as it can; p50 of the deploy server (`run.py deploy`, that ONNX file)
  against the learning server's greedy step (`run.py -p benchmarks/presets/perf_ppo.py`, the same network
  size), --rounds times alternating the order.
- memory: the RSS of both server processes after their runs.
- images: `Policy.act_batch` on 8 uint8 84x84x4 frames given as arrays (as the deploy server's parser hands a
  binary body's tensor over: checked, then run) against `Policy.run` on the same (the model alone), for an
  exported PPO CnnPolicy (its initial weights): what checking the frames costs. On 2026-11-29, two runs of each
  alternated: 0.99-1.07x the run; the version before, which turned each frame into Python lists and checked
  those, 80-88x (122-125 ms against 1.4-1.5 ms).

Needs wrk (Debian's package). Everything runs on 127.0.0.1 and stops by itself.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, Server, Shepherd  # noqa: E402
from benchmarks.perf import OBS, PPO_PRESET, sessions, wrk  # noqa: E402


def sb3_and_onnx(folder: Path):
    """SB3's CartPole PPO and its greedy policy as the exporter writes it (`shepherd.agents.export.export`)."""
    import numpy as np
    import torch as th

    from shepherd.agents import build_learner
    from shepherd.agents.export.export import export_onnx
    from shepherd.wire.spaces import parse_space

    th.set_num_threads(1)  # as Shepherd's learners run, and as Policy runs onnxruntime
    learner = build_learner("PPO", "perf-ppo", parse_space([[4], "-inf", "inf"]), parse_space(2), {"seed": 0}, None)
    try:
        path = folder / "cartpole_ppo.onnx"
        path.write_bytes(export_onnx(learner.algorithm, "perf-ppo", "PPO"))
        return learner.model, path, np  # SB3's own PPO model (MlpPolicy, 64x64 tanh), never started
    finally:
        learner.close()


def per_call(function, repeat: int) -> float:
    """Microseconds per call, the median of 7 rounds (this machine's speed wanders)."""
    rounds = []
    for _ in range(7):
        started = time.perf_counter()
        for _ in range(repeat):
            function()
        rounds.append((time.perf_counter() - started) / repeat * 1e6)
    return statistics.median(rounds)


def forward(model, path: Path, np) -> dict:
    from shepherd.policies.onnx import Policy

    policy = Policy.load(path)
    rng = np.random.default_rng(0)
    check = rng.normal(size=(1000, 4)).astype(np.float32)
    predicted = model.predict(check, deterministic=True)[0].tolist()
    if policy.act_batch(check.tolist()) != predicted:
        raise SystemExit("the ONNX actor's actions differ from SB3's predict(): the comparison would be unfair")
    one, batch = np.asarray(OBS, dtype=np.float32), rng.normal(size=(64, 4)).astype(np.float32)
    one_list, batch_list = list(OBS), batch.tolist()
    return {"act_us": per_call(lambda: policy.act(one_list), 3000),
            "act_numpy_us": per_call(lambda: policy.act(one), 3000),
            "predict_us": per_call(lambda: model.predict(one, deterministic=True), 1000),
            "act_batch64_us": per_call(lambda: policy.act_batch(batch_list), 500),
            "predict_batch64_us": per_call(lambda: model.predict(batch, deterministic=True), 300)}


def images(folder: Path, np) -> dict:
    from shepherd.agents import build_learner
    from shepherd.agents.export.export import export_onnx
    from shepherd.policies.onnx import Policy
    from shepherd.wire.spaces import parse_space

    learner = build_learner("PPO", "eyes", parse_space(["Image", [84, 84, 4]]), parse_space(4), {"seed": 0}, None)
    try:
        policy = Policy.from_bytes(export_onnx(learner.algorithm, "eyes", "PPO"))
    finally:
        learner.close()
    frames = np.random.default_rng(0).integers(0, 256, (8, 84, 84, 4)).astype(np.uint8)
    if policy.act_batch(frames) != np.asarray(policy.run(list(frames))).reshape(-1).tolist():
        raise SystemExit("act_batch and run answer differently on the same frames")
    return {"act_batch8_images_us": per_call(lambda: policy.act_batch(frames), 20),
            "run8_images_us": per_call(lambda: policy.run(list(frames)), 20)}


class Deploy(Server):
    """``run.py deploy FILE`` with the URL and the API key it printed."""

    def __init__(self, policy: Path, cwd: Path) -> None:
        super().__init__([sys.executable, str(ROOT / "run.py"), "deploy", str(policy), "--port", "0"],
                         ready="Stop with Ctrl-C")
        text = "".join(self.lines)
        self.url = re.search(r"at (http://\S+?)/?$", text, re.M).group(1)
        self.key = re.search(r"^API key .*: (\S+)$", text, re.M).group(1)


def round_trips(path: Path, data: Path, seconds: float, rounds: int) -> dict:
    runs: dict[str, list] = {"deploy": [], "learning": []}
    rss: dict[str, float] = {}
    for index in range(rounds):
        order = ["deploy", "learning"] if index % 2 == 0 else ["learning", "deploy"]
        for side in order:
            if side == "deploy":
                server: Server = Deploy(path, data)
                key = server.key  # type: ignore[attr-defined]
            else:
                server = Shepherd(PPO_PRESET, data / f"learning-{index}", "--rate-limit", "0")
                key = server.keys["perf-ppo"]  # type: ignore[attr-defined]
            try:
                keys = sessions(server.url, key, 1)  # type: ignore[attr-defined]
                runs[side].append(wrk(server.url, keys, 1, seconds))  # type: ignore[attr-defined]
                rss[side] = max(rss.get(side, 0.0), server.rss_mb())
            finally:
                server.stop()
    return {side: {"p50_ms": statistics.median(r["p50_ms"] for r in results),
                   "p99_ms": statistics.median(r["p99_ms"] for r in results),
                   "per_s": statistics.median(r["per_s"] for r in results), "rss_mb": rss[side]}
            for side, results in runs.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0, help="each wrk run (default: 5)")
    parser.add_argument("--rounds", type=int, default=2, help="round trips of each server, alternating (default: 2)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shepherd-deploy-bench-") as folder:
        data = Path(folder)
        print("forward: Policy.act / act_batch against SB3 predict() ...", flush=True)
        model, path, np = sb3_and_onnx(data)
        figures = {"forward": {**forward(model, path, np), **images(data, np)}}
        print(f"round trips: deploy server against the learning server, {args.rounds} round(s) of "
              f"{args.seconds:g} s ...", flush=True)
        figures["round_trip"] = round_trips(path, data, args.seconds, args.rounds)
    f, r = figures["forward"], figures["round_trip"]
    rows = [
        ("Policy.act, one observation", f"{f['act_us']:.1f} us", f"SB3 predict() {f['predict_us']:.1f} us: "
         f"{f['predict_us'] / f['act_us']:.1f}x faster (numpy in: {f['act_numpy_us']:.1f} us)"),
        ("Policy.act_batch, 64 observations", f"{f['act_batch64_us']:.1f} us",
         f"SB3 predict() of 64 {f['predict_batch64_us']:.1f} us: {f['predict_batch64_us'] / f['act_batch64_us']:.1f}x faster"),
        ("Policy.act_batch, 8 frames 84x84x4 (arrays)", f"{f['act_batch8_images_us'] / 1000:.2f} ms",
         f"Policy.run alone {f['run8_images_us'] / 1000:.2f} ms: checked and run, "
         f"{f['act_batch8_images_us'] / f['run8_images_us']:.2f}x the model alone"),
        ("greedy round trip p50, deploy server", f"{r['deploy']['p50_ms']:.3f} ms ({r['deploy']['per_s']:,.0f}/s)",
         f"learning server, evaluate mode {r['learning']['p50_ms']:.3f} ms ({r['learning']['per_s']:,.0f}/s): "
         f"{r['deploy']['p50_ms'] / r['learning']['p50_ms']:.2f}x"),
        ("RSS, deploy server", f"{r['deploy']['rss_mb']:.0f} MB",
         f"learning server {r['learning']['rss_mb']:.0f} MB: {r['deploy']['rss_mb'] / r['learning']['rss_mb']:.2f}x"),
    ]
    width = max(len(row[0]) for row in rows)
    for name, measured, compared in rows:
        print(f"{name:<{width}}  {measured:>22}  {compared}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
