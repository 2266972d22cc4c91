#!/usr/bin/env python
"""Does one key's evaluate-mode vector steps of large observations slow another agent's steps? (issue 39, M2)

    .venv/bin/python benchmarks/eval_isolation.py [--seconds 8] [--envs 16]

Serves benchmarks/presets/big_obs.py on 127.0.0.1, times the small agent's single steps (one client, one
step in flight) alone, then while two threads send the big agent's evaluate-mode vector steps (``--envs``
observations of 4096 numbers each, about 45 KB a env) as fast as the server answers them. Prints one JSON
object: the small agent's step latency (p50, p90, ms) alone and under that load, and the big steps answered.
Stops by itself.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
from pathlib import Path
from tempfile import TemporaryDirectory

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, Shepherd  # noqa: E402

PRESET = ROOT / "benchmarks" / "presets" / "big_obs.py"


def connect(url: str) -> http.client.HTTPConnection:
    host, port = url.split("//")[1].rstrip("/").split(":")
    return http.client.HTTPConnection(host, int(port), timeout=60)


def post(connection: http.client.HTTPConnection, path: str, body: bytes) -> dict:
    connection.request("POST", path, body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    reply = json.loads(response.read())
    if response.status != 200:
        raise RuntimeError(f"{path}: HTTP {response.status} {reply}")
    return reply


def login(connection: http.client.HTTPConnection, key: str, **fields: object) -> str:
    return post(connection, "/shepherd/login_user/", json.dumps({"apikey": key, **fields}).encode())["session_key"]


def small_steps(url: str, key: str, seconds: float) -> list[float]:
    """Single steps of the small agent for ``seconds``: their round trips (ms)."""
    connection = connect(url)
    session, latencies, end = login(connection, key), [], time.monotonic() + seconds
    seq = 0
    while time.monotonic() < end:
        seq += 1
        body = json.dumps({"session_key": session, "obs": [random.random() for _ in range(4)], "reward": 1.0,
                           "done": seq % 50 == 0, "seq": seq}).encode()
        began = time.perf_counter()
        post(connection, "/shepherd/env/", body)
        latencies.append((time.perf_counter() - began) * 1000)
    connection.close()
    return latencies


def big_steps(url: str, key: str, n_envs: int, stop: threading.Event, count: list[int]) -> None:
    connection = connect(url)
    session = login(connection, key, mode="evaluate", n_envs=n_envs)
    obs = [[round(random.uniform(-1, 1), 4) for _ in range(4096)] for _ in range(n_envs)]
    seq = 0
    while not stop.is_set():
        seq += 1
        body = json.dumps({"session_key": session, "obs": obs, "reward": [0.0] * n_envs,
                           "terminated": [False] * n_envs, "truncated": [False] * n_envs, "seq": seq}).encode()
        post(connection, "/shepherd/env/", body)
        count[0] += 1
    connection.close()


def figures(latencies: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(latencies, n=10)
    return {"steps": len(latencies), "p50_ms": round(statistics.median(latencies), 2), "p90_ms": round(cuts[8], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--envs", type=int, default=16)
    args = parser.parse_args()
    with TemporaryDirectory() as folder:
        server = Shepherd(PRESET, Path(folder) / "data", "--max-body", str(4 << 20))
        try:
            small_steps(server.url, server.keys["small"], 2.0)  # warm-up
            alone = small_steps(server.url, server.keys["small"], args.seconds)
            stop, counts = threading.Event(), [[0], [0]]
            loaders = [threading.Thread(target=big_steps, args=(server.url, server.keys["big"], args.envs, stop, count),
                                        daemon=True) for count in counts]
            for thread in loaders:
                thread.start()
            time.sleep(1.0)
            loaded = small_steps(server.url, server.keys["small"], args.seconds)
            stop.set()
            for thread in loaders:
                thread.join(60)
        finally:
            server.stop()
    print(json.dumps({"small_alone": figures(alone), "small_under_big_eval_load": figures(loaded),
                      "big_vector_steps_per_s": round(sum(c[0] for c in counts) / (args.seconds + 1.0), 1),
                      "envs_per_big_step": args.envs}))


if __name__ == "__main__":
    main()
