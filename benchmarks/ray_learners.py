#!/usr/bin/env python
"""The price and the gain of learners as Ray actors (run.py --ray), in-process against --ray in one run.

    .venv/bin/python benchmarks/ray_learners.py              # about 8 minutes (more on a busy machine)
    .venv/bin/python benchmarks/ray_learners.py --seconds 20  # shorter windows for parts 1 and 2
    .venv/bin/python benchmarks/ray_learners.py --parts 3     # part 3 alone, about 4 minutes

1. The Ray hop: one client's training round trip (CartPole PPO, benchmarks/presets/perf_ppo.py), p50 and
   p90, served in-process and with --ray (a local Ray on 127.0.0.1): the step crosses to the learner's
   actor and back (one remote call per batch, pickled requests and answers).
2. Four agents learning at once (benchmarks/presets/ray4.py, one client process each): training steps per
   second summed over the agents, in-process (four learner threads in one process) and with --ray (four
   actor processes). On two cores the clients, the server and the learners share the same two cores, so
   this shows the cost of the processes more than any gain; the gain needs cores (or nodes) that one
   process cannot use.
3. How the learners' training throughput scales with the cores Ray is given (benchmarks/ray_cores.py):
   four learner-bound PPO agents (benchmarks/presets/ray4_heavy.py) on --ray, the Ray node's processes
   (the learner actors among them) restricted to 1 core and to 2 cores by CPU affinity, alternating
   (1, 2, 1, 2), the head and the clients unrestricted in both; steps/s and SB3 updates/s of each trial,
   their medians and the ratios 2 cores / 1 core. On this machine (2 cores, shared, load average about 4):
   1.50x steps/s and 1.58x SB3 updates/s, the Ray node getting 1.48 cores of the 2 it was allowed (the
   head and clients share them); the same steps per core it got in both settings (docs/distributed.md).

Prints one JSON object with the figures and the ratios (--ray / in-process, 2 cores / 1 core). Everything
runs on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

import gymnasium as gym

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, Shepherd, metrics, terminate_all  # noqa: E402
from benchmarks.ray_cores import scaling  # noqa: E402
from shepherd.client import Client  # noqa: E402

PRESETS = ROOT / "benchmarks" / "presets"


def round_trips(extra: list[str], seconds: float) -> dict:
    """One training client's round trips over ``seconds`` (the first tenth dropped as warm-up)."""
    with TemporaryDirectory() as data:
        server = Shepherd(PRESETS / "perf_ppo.py", Path(data), "--quiet", *extra)
        try:
            client = Client(server.url, server.keys["perf-ppo"], timeout=60)
            client.login()
            env = gym.make("CartPole-v1")
            times: list[float] = []
            end, episode = time.monotonic() + seconds, 0
            while time.monotonic() < end:
                obs, _ = env.reset(seed=episode)
                episode += 1
                action = client.step(obs.tolist(), 0.0, False)
                done = False
                while not done:
                    obs, reward, terminated, truncated, _ = env.step(action)
                    done = terminated or truncated
                    started = time.perf_counter()
                    action = client.step(obs.tolist(), float(reward), done, truncated=truncated)
                    times.append(time.perf_counter() - started)
            client.close()
        finally:
            server.stop()
    times = sorted(times[len(times) // 10:])
    return {"steps": len(times), "p50_us": round(times[len(times) // 2] * 1e6),
            "p90_us": round(times[int(len(times) * 0.9)] * 1e6)}


def training_rate(extra: list[str], seconds: float, warmup: float = 15.0) -> dict:
    """Steps per second of the four agents of ray4.py, each driven by one client process."""
    with TemporaryDirectory() as data:
        server = Shepherd(PRESETS / "ray4.py", Path(data), "--quiet", *extra)
        clients = []
        try:
            for index, key in enumerate(server.keys.values()):
                clients.append(subprocess.Popen(
                    [sys.executable, "-m", "shepherd.client", "--url", server.url, "--env", "CartPole-v1",
                     "--seed", str(index)], cwd=ROOT, stdout=subprocess.DEVNULL,
                    env={**os.environ, "SHEPHERD_API_KEY": key, "PYTHONPATH": str(ROOT)}))
            time.sleep(warmup)
            first, started = metrics(server.url).get("shepherd_agent_steps_total", 0.0), time.monotonic()
            time.sleep(seconds)
            last, ended = metrics(server.url).get("shepherd_agent_steps_total", 0.0), time.monotonic()
        finally:
            terminate_all(clients)
            server.stop()
    return {"steps_per_second": round((last - first) / (ended - started), 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=40.0,
                        help="each measured window of parts 1 and 2 (default %(default)s)")
    parser.add_argument("--parts", default="1,2,3", help="which parts to run, comma-separated (default %(default)s)")
    parser.add_argument("--cores-rounds", type=int, default=2,
                        help="part 3: trials of each setting, 1 and 2 cores (default %(default)s)")
    parser.add_argument("--cores-seconds", type=float, default=25.0,
                        help="part 3: each measured window (default %(default)s)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if not parts or parts - {"1", "2", "3"}:
        parser.error("--parts takes 1, 2 and 3, comma-separated")
    result: dict = {"cores": os.cpu_count()}
    if "1" in parts:
        result["round_trip_in_process"] = round_trips([], args.seconds)
        result["round_trip_ray"] = round_trips(["--ray"], args.seconds)
        hop, local = result["round_trip_ray"], result["round_trip_in_process"]
        result["ray_hop_p50_us"] = hop["p50_us"] - local["p50_us"]
        result["round_trip_p50_ratio"] = round(hop["p50_us"] / local["p50_us"], 2)
        result["round_trip_p90_ratio"] = round(hop["p90_us"] / local["p90_us"], 2)
    if "2" in parts:
        result["four_agents_in_process"] = training_rate([], args.seconds)
        result["four_agents_ray"] = training_rate(["--ray"], args.seconds)
        result["four_agents_steps_ratio"] = round(result["four_agents_ray"]["steps_per_second"]
                                                  / result["four_agents_in_process"]["steps_per_second"], 2)
    if "3" in parts:
        result["ray_cores"] = scaling(args.cores_rounds, args.cores_seconds, warmup=15.0)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
