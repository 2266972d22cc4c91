#!/usr/bin/env python
"""Bounded load test on loopback: 64 well-behaved clients over 3 agents, then a garbage sender and a
flooder joining them. Prints steps/s, p50/p99 latency and errors of the good clients in each phase, and
the server's memory over time; writes the figures as JSON.

    .venv/bin/python benchmarks/load.py                 # about 4 minutes
    .venv/bin/python benchmarks/load.py --phase 20      # shorter phases, for a quick look
    .venv/bin/python benchmarks/load.py --soak 60       # a one-hour soak (see below)

Phases: warm-up, good clients alone, good clients with the bad ones, good clients alone again. The
server is a real ``run.py`` process serving benchmarks/presets/load3.py with its default limits; the
load generator is one asyncio process (a second one for the bad clients), everything on 127.0.0.1,
and everything stops by itself.

``--soak MINUTES`` runs the same phases over a longer time, the bad clients present for most of it:
5 minutes of warm-up, 5 of good clients only, then the garbage sender and the flooder until 5 minutes
before the end, then good clients only again (a sixth of the time each instead of 5 minutes in a
soak shorter than 30 minutes). It adds the slope of the server's RSS in MB per hour (a
least-squares line through the samples after the warm-up), the p99 of every 5-minute window, and the
server's open file descriptors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import gymnasium as gym

ROOT = Path(__file__).resolve().parents[1]
PRESET = ROOT / "benchmarks" / "presets" / "load3.py"


def start_server(data: Path, *extra: str) -> tuple[subprocess.Popen, str, dict[str, str]]:
    """Start run.py and read the URL and the API keys it prints."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    process = subprocess.Popen([sys.executable, str(ROOT / "run.py"), "-p", str(PRESET), "--port", "0",
                                "--data", str(data), *extra], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                               env=env)
    url, keys = None, {}
    for line in process.stdout:
        if match := re.search(r"serving preset \S+ at (http://\S+)", line):
            url = match.group(1)
        if match := re.search(r"API key for agent (\S+) \(.*\): (\S+)", line):
            keys[match.group(1)] = match.group(2)
        if line.startswith("Stop with Ctrl-C"):
            return process, url, keys
    raise RuntimeError("the server did not start")


def stop_server(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(90)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def slope_per_hour(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB) samples, in MB per hour."""
    if len(samples) < 2:
        return float("nan")
    mean_t = statistics.fmean(t for t, _ in samples)
    mean_y = statistics.fmean(y for _, y in samples)
    variance = sum((t - mean_t) ** 2 for t, _ in samples)
    return sum((t - mean_t) * (y - mean_y) for t, y in samples) / variance * 3600 if variance else float("nan")


class Recorder:
    """Latencies and errors of the good clients, by phase."""

    def __init__(self) -> None:
        self.phase = "warm-up"
        self.window = 0
        self.latencies: dict[str, list[float]] = {}
        self.windows: dict[int, list[float]] = {}
        self.errors: dict[str, dict[str, int]] = {}

    def record(self, seconds: float) -> None:
        self.latencies.setdefault(self.phase, []).append(seconds)
        self.windows.setdefault(self.window, []).append(seconds)

    def error(self, what: str) -> None:
        phase = self.errors.setdefault(self.phase, {})
        phase[what] = phase.get(what, 0) + 1


async def good_client(url: str, apikey: str, seed: int, recorder: Recorder, stop: asyncio.Event) -> None:
    """A well-behaved client: CartPole through the protocol, with seq numbers, one connection."""
    env = gym.make("CartPole-v1")
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as http:
        async def post(path: str, body: dict) -> dict | None:
            started = time.perf_counter()
            try:
                async with http.post(url + path, json=body) as response:
                    reply = await response.json()
                    if response.status != 200:
                        recorder.error(f"HTTP {response.status}: {reply.get('error', '')[:60]}")
                        return None
            except (aiohttp.ClientError, asyncio.TimeoutError) as error:
                recorder.error(type(error).__name__)
                return None
            recorder.record(time.perf_counter() - started)
            return reply

        login = await post("/shepherd/login_user/", {"apikey": apikey})
        if login is None:
            return
        key, seq, obs = login["session_key"], 0, env.reset(seed=seed)[0]
        reward, done = 0.0, False
        while not stop.is_set():
            seq += 1
            reply = await post("/shepherd/env/", {"session_key": key, "obs": obs.tolist(), "reward": reward,
                                                  "done": done, "seq": seq})
            if reply is None:
                await asyncio.sleep(0.1)
                continue
            if reply["action"] is None:
                obs, reward, done = env.reset()[0], 0.0, False
                continue
            obs, reward, terminated, truncated, _ = env.step(reply["action"])
            done = terminated or truncated


def bad_clients(url: str, garbage_key: str, flood_key: str, seconds: float, queue) -> None:
    """Runs in its own process: one client sending garbage, one flooding steps on 8 connections."""
    async def main() -> dict:
        counts: dict[str, int] = {}
        deadline = time.monotonic() + seconds
        rng = random.Random(0)

        def count(kind: str, status: int) -> None:
            counts[f"{kind} {status}"] = counts.get(f"{kind} {status}", 0) + 1

        async with aiohttp.ClientSession() as http:
            async def login(apikey: str) -> str:
                async with http.post(url + "/shepherd/login_user/", json={"apikey": apikey}) as response:
                    return (await response.json())["session_key"]

            garbage_session = await login(garbage_key)
            bodies = [b"{not json", b"[1, 2]", b'{"session_key": "nope", "obs": [0, 0, 0, 0]}',
                      b'{"session_key": "%s", "obs": [NaN, 0, 0, 0]}' % garbage_session.encode(),
                      b'{"session_key": "%s", "obs": [1, 2, 3]}' % garbage_session.encode(),
                      b'{"session_key": "%s", "obs": "x", "hack": 1}' % garbage_session.encode(),
                      b'{"apikey": "guess-%d"}', b"x" * (2 << 20)]

            async def garbage() -> None:
                while time.monotonic() < deadline:
                    body = rng.choice(bodies)
                    path = "/shepherd/login_user/" if b"apikey" in body else "/shepherd/env/"
                    try:
                        async with http.post(url + path, data=body,
                                             headers={"Content-Type": "application/json"}) as response:
                            await response.read()
                            count("garbage", response.status)
                    except aiohttp.ClientError as error:
                        count("garbage", type(error).__name__)

            async def flood(session: str) -> None:
                seq = 0
                while time.monotonic() < deadline:
                    seq += 1
                    body = {"session_key": session, "obs": [0.0, 0.0, 0.0, 0.0], "reward": 0.0, "done": False,
                            "seq": seq}
                    try:
                        async with http.post(url + "/shepherd/env/", json=body) as response:
                            await response.read()
                            count("flood", response.status)
                    except aiohttp.ClientError as error:
                        count("flood", type(error).__name__)

            flood_sessions = [await login(flood_key) for _ in range(8)]
            await asyncio.gather(garbage(), *(flood(s) for s in flood_sessions))
        return counts

    queue.put(asyncio.run(main()))


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000)[int(q * 10) - 1] if len(values) > 10 else float("nan")


async def run(args: argparse.Namespace) -> dict:
    data = Path(tempfile.mkdtemp(prefix="shepherd-load-"))
    server, url, keys = start_server(data)
    stop_server(server)  # again with --new-key: the bad clients get keys of their own
    server, url, more_keys = start_server(data, "--new-key")
    agents = sorted(keys)
    recorder, stop = Recorder(), asyncio.Event()
    memory: list[tuple[float, str, float]] = []
    started, wall_start = time.monotonic(), time.time()
    clients = [asyncio.create_task(good_client(url, keys[agents[i % 3]], i, recorder, stop))
               for i in range(args.clients)]
    if args.soak:
        total = args.soak * 60
        fixed = min(300.0, total / 6)  # 5 minutes each, less in a short trial run
        phases = [("warm-up", fixed), ("good only", fixed), ("with bad clients", total - 3 * fixed),
                  ("good only again", fixed)]
    else:
        phases = [("warm-up", args.phase / 2), ("good only", args.phase), ("with bad clients", args.phase),
                  ("good only again", args.phase)]
    fds: list[tuple[float, int]] = []
    bad_result = multiprocessing.Queue()
    bad_process = None
    counted: dict[str, tuple[float, int]] = {}
    for name, seconds in phases:
        recorder.phase = name
        if name == "with bad clients":
            bad_process = multiprocessing.Process(target=bad_clients, args=(
                url, more_keys[agents[0]], more_keys[agents[2]], seconds, bad_result))
            bad_process.start()
        phase_start = time.monotonic()
        while time.monotonic() - phase_start < seconds:
            await asyncio.sleep(min(5.0, seconds))
            now = time.monotonic() - started
            recorder.window = int(now // args.window)
            memory.append((round(now, 1), name, round(rss_mb(server.pid), 1)))
            fds.append((round(now, 1), open_fds(server.pid)))
        counted[name] = (time.monotonic() - phase_start, len(recorder.latencies.get(name, [])))
    stop.set()
    await asyncio.gather(*clients)
    bad_counts = bad_result.get(timeout=60) if bad_process is not None else {}
    if bad_process is not None:
        bad_process.join(30)
    stop_server(server)
    after_warmup = [(t, mb) for t, phase, mb in memory if phase != "warm-up"]
    results = {"date": time.strftime("%Y-%m-%d"), "started": time.strftime("%H:%M UTC", time.gmtime(wall_start)),
               "cpus": os.cpu_count(), "clients": args.clients, "soak_minutes": args.soak,
               "phase_seconds": {name: seconds for name, seconds in phases}, "phases": {},
               "bad_clients": bad_counts, "rss_mb": memory, "open_fds": fds,
               "rss_slope_mb_per_hour_after_warmup": round(slope_per_hour(after_warmup), 2),
               "p99_ms_by_window": {f"{w * args.window:.0f}-{(w + 1) * args.window:.0f} s":
                                    round(percentile(values, 99) * 1e3, 2)
                                    for w, values in sorted(recorder.windows.items())}}
    for name, (seconds, count) in counted.items():
        latencies = recorder.latencies.get(name, [])
        results["phases"][name] = {
            "steps_per_s": round(count / seconds, 1),
            "p50_ms": round(percentile(latencies, 50) * 1e3, 2),
            "p99_ms": round(percentile(latencies, 99) * 1e3, 2),
            "errors": recorder.errors.get(name, {}),
        }
    return results


def report(results: dict) -> None:
    print(f"\nload test, {results['clients']} good clients over 3 agents, {results['cpus']} CPUs, "
          f"{results['date']}")
    print(f"{'phase':<18} {'steps/s':>9} {'p50 ms':>8} {'p99 ms':>8}  errors of good clients")
    for name, phase in results["phases"].items():
        errors = sum(phase["errors"].values())
        print(f"{name:<18} {phase['steps_per_s']:>9.0f} {phase['p50_ms']:>8.2f} {phase['p99_ms']:>8.2f}  "
              f"{errors}{' ' + json.dumps(phase['errors']) if errors else ''}")
    print("bad clients' replies:", json.dumps(results["bad_clients"], sort_keys=True))
    rss = results["rss_mb"]
    after_warmup = [mb for _, phase, mb in rss if phase != "warm-up"]
    if len(rss) <= 200:
        print("server RSS (MB) every 5 s:", " ".join(f"{mb:.0f}" for _, _, mb in rss))
    else:  # a soak: one sample a minute
        print("server RSS (MB) every minute:", " ".join(f"{mb:.0f}" for _, _, mb in rss[11::12]))
    if after_warmup:
        print(f"RSS after warm-up: first {after_warmup[0]:.1f} MB, min {min(after_warmup):.1f} MB, "
              f"max {max(after_warmup):.1f} MB, last {after_warmup[-1]:.1f} MB; least-squares slope "
              f"{results['rss_slope_mb_per_hour_after_warmup']:+.2f} MB/hour over {len(after_warmup)} samples")
    fds = [n for _, n in results["open_fds"]]
    if fds:
        print(f"server's open file descriptors: first {fds[0]}, max {max(fds)}, last {fds[-1]}")
    print("p99 (ms) by window:", " ".join(f"{w}: {p:.0f}" for w, p in results["p99_ms_by_window"].items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=64, help="well-behaved clients (default %(default)s)")
    parser.add_argument("--phase", type=float, default=60.0, help="seconds per phase (default %(default)s)")
    parser.add_argument("--soak", type=float, metavar="MINUTES",
                        help="a soak of this many minutes instead of --phase's phases")
    parser.add_argument("--window", type=float, default=300.0,
                        help="seconds per window of the p99-by-window figures (default %(default)s)")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "load.json",
                        help="where to write the figures (default %(default)s)")
    args = parser.parse_args()
    if args.soak is not None and args.soak <= 0:
        parser.error("--soak takes a positive number of minutes")
    results = asyncio.run(run(args))
    report(results)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    print(f"figures written to {args.json}")
    good_errors = sum(sum(phase["errors"].values()) for phase in results["phases"].values())
    return 0 if good_errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
