#!/usr/bin/env python
"""Where a vector client's time goes: one client's drive loop with timers, against a real server and
against the bare echo server with the same body.

    .venv/bin/python benchmarks/vector_latency.py                                   # PPO, 8 envs
    .venv/bin/python benchmarks/vector_latency.py --preset benchmarks/presets/perf_dqn_vec.py --envs 4

Prints one JSON object: the echo's round trip for the same body and client code; then, for the server,
the client's time per vector step in its own work (stepping the gymnasium vector env, building the body)
and in `VectorClient.step` (the HTTP round trip), the round trips that waited for an update (over 5 ms)
apart, and the learner's act histograms from GET /metrics over the same window. Everything runs on
127.0.0.1 for about a minute and stops by itself.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, Echo, Shepherd, metrics  # noqa: E402
from shepherd.client import VectorClient, first_vector_step, gymnasium_vector_step, make_vector_env  # noqa: E402
from shepherd.client.connection import _Connection  # noqa: E402
from shepherd.client.loops import _actions  # noqa: E402

OBS = [0.01, -0.02, 0.03, 0.04]


def echo_round_trip(n_envs: int, seconds: float) -> dict:
    echo = Echo("orjson")
    try:
        connection = _Connection(echo.url, "-")
        body = {"session_key": "k" * 43, "obs": [OBS] * n_envs, "reward": [1.0] * n_envs,
                "terminated": [False] * n_envs, "truncated": [False] * n_envs, "seq": 1}
        times, end = [], time.monotonic() + seconds
        while time.monotonic() < end:
            started = time.perf_counter()
            connection.post("/shepherd/env/", body)
            times.append(time.perf_counter() - started)
        connection.close()
    finally:
        echo.stop()
    times = sorted(times[len(times) // 10:])  # the first tenth is warm-up
    return {"echo_round_trip_mean_us": sum(times) / len(times) * 1e6,
            "echo_round_trip_median_us": times[len(times) // 2] * 1e6}


def timed_client(preset: Path, n_envs: int, warmup: float, seconds: float, data: Path) -> dict:
    server = Shepherd(preset, data, "--rate-limit", "0")
    try:
        client = VectorClient(server.url, next(iter(server.keys.values())), n_envs)
        client.login()
        env = make_vector_env("CartPole-v1", n_envs)
        obs, _ = env.reset(seed=0)
        body, space = first_vector_step(obs, n_envs), env.single_action_space
        trips, local = [], []
        start = time.monotonic() + warmup
        end = start + seconds
        before = None
        while time.monotonic() < end:
            if before is None and time.monotonic() >= start:
                before, trips, local = metrics(server.url), [], []
            t0 = time.perf_counter()
            actions = client.step(**body)
            t1 = time.perf_counter()
            body = gymnasium_vector_step(*env.step(_actions(space, actions)))
            local.append(time.perf_counter() - t1)
            trips.append(t1 - t0)
        after = metrics(server.url)
        client.logout()
        env.close()
    finally:
        server.stop()
    short = [t for t in trips if t <= 0.005]
    long = [t for t in trips if t > 0.005]
    wall = sum(trips) + sum(local)
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    acts = max(1.0, delta.get("shepherd_act_latency_seconds_count:queue_wait", 0.0))
    batches = max(1.0, delta.get("shepherd_act_latency_seconds_count:forward", 0.0))
    return {"vector_steps": len(trips), "env_steps_per_s": len(trips) * n_envs / wall,
            "client_env_and_body_mean_us": sum(local) / len(local) * 1e6,
            "round_trip_mean_us": sum(short) / max(1, len(short)) * 1e6,
            "update_waits": len(long), "update_wait_mean_ms": sum(long) / max(1, len(long)) * 1e3,
            "learner_queue_wait_mean_us": delta.get("shepherd_act_latency_seconds_sum:queue_wait", 0) / acts * 1e6,
            "learner_batch_mean_us": delta.get("shepherd_act_latency_seconds_sum:forward", 0) / batches * 1e6,
            "learner_update_mean_ms": delta.get("shepherd_training_update_duration_seconds_sum", 0)
            / max(1.0, delta.get("shepherd_training_update_duration_seconds_count", 0)) * 1e3}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--preset", type=Path, default=ROOT / "benchmarks" / "presets" / "perf_ppo.py")
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds (default %(default)s)")
    args = parser.parse_args()
    figures = echo_round_trip(args.envs, 10.0)
    with TemporaryDirectory(prefix="shepherd-latency-") as folder:
        figures.update(timed_client(args.preset, args.envs, 5.0, args.seconds, Path(folder)))
    print(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
