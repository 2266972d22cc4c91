#!/usr/bin/env python
"""Does one key's evaluate-mode vector steps of large observations slow another agent's steps? (issue 39, M2)

    .venv/bin/python benchmarks/eval_isolation.py [--seconds 8] [--envs 16]
    .venv/bin/python benchmarks/eval_isolation.py --uploads      # client-acting uploads instead (issue 48, M4)

Serves benchmarks/presets/big_obs.py on 127.0.0.1, times the small agent's single steps (one client, one
step in flight) alone, then while two threads send the big agent's evaluate-mode vector steps (``--envs``
observations of 4096 numbers each, about 45 KB a env) as fast as the server answers them. Prints one JSON
object: the small agent's step latency (p50, p90, ms) alone and under that load, and the big steps answered.
With ``--uploads`` the two threads are client-acting sessions of one env each uploading the big agent's
blocks instead (T = 32 rows of 4096 numbers, about 950 kB, with one ``true`` among the observations so
that the checks take the per-value path, as issue 48's M4 did). Stops by itself.
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


def big_uploads(url: str, key: str, n_envs: int, stop: threading.Event, count: list[int]) -> None:
    """A client-acting session of one env uploading blocks as fast as they are answered (``n_envs`` unused)."""
    connection = connect(url)
    opened = post(connection, "/shepherd/login_user/", json.dumps({"apikey": key, "acting": "client"}).encode())
    session, version, steps = opened["session_key"], opened["policy_version"], opened["steps"]
    obs = [[[round(random.uniform(-1, 1), 4) for _ in range(4096)]] for _ in range(steps + 1)]
    obs[0][0][0] = True  # valid (a Box takes true as 1), but only the per-value checker knows: the slow path
    seq = 0
    while not stop.is_set():
        seq += 1
        body = json.dumps({"session_key": session, "seq": seq, "policy_version": version, "obs": obs[:steps + 1],
                           "sample": [[random.randrange(2)] for _ in range(steps)], "reward": [[0.0]] * steps,
                           "terminated": [[False]] * steps, "truncated": [[False]] * steps}).encode()
        reply = post(connection, "/shepherd/experience/", body)
        version, steps = reply["policy_version"], reply["steps"]
        count[0] += 1
    connection.close()


def figures(latencies: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(latencies, n=10)
    return {"steps": len(latencies), "p50_ms": round(statistics.median(latencies), 2), "p90_ms": round(cuts[8], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--uploads", action="store_true", help="load with client-acting uploads, not eval steps")
    args = parser.parse_args()
    load = big_uploads if args.uploads else big_steps
    with TemporaryDirectory() as folder:
        server = Shepherd(PRESET, Path(folder) / "data", "--max-body", str(4 << 20))
        try:
            small_steps(server.url, server.keys["small"], 2.0)  # warm-up
            alone = small_steps(server.url, server.keys["small"], args.seconds)
            stop, counts = threading.Event(), [[0], [0]]
            loaders = [threading.Thread(target=load, args=(server.url, server.keys["big"], args.envs, stop, count),
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
    load_name, rate_name = ("uploads", "uploads") if args.uploads else ("eval_load", "vector_steps")
    print(json.dumps({"small_alone": figures(alone), f"small_under_big_{load_name}": figures(loaded),
                      f"big_{rate_name}_per_s": round(sum(c[0] for c in counts) / (args.seconds + 1.0), 1),
                      "envs_per_big_step": 1 if args.uploads else args.envs}))


if __name__ == "__main__":
    main()
