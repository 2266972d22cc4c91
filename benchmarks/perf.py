#!/usr/bin/env python
"""Shepherd's performance benchmarks: every figure of the performance targets, each compared with a
baseline measured in the same run, printed as one table and written as JSON.

    .venv/bin/python benchmarks/perf.py                  # everything, about 10 minutes on 2 cores
    .venv/bin/python benchmarks/perf.py --only p1 p2     # some of it
    .venv/bin/python benchmarks/perf.py --seconds 5      # shorter load runs

The load generator is wrk (Debian's package `wrk`), one connection per wrk thread, each connection with
a session of its own; it drives the bare aiohttp JSON echo server (benchmarks/echo_server.py) with the
same body and concurrency as Shepherd, which shows what the generator and the machine can do at all.
Everything runs on 127.0.0.1 and stops by itself.

- forward: a raw torch forward of SB3's CartPole PPO policy, SB3's predict(), a batch of 16, and
  Shepherd's two greedy paths (the learner's batch of one, the numpy snapshot of the event loop);
- P1: one client, inference only (a session in evaluate mode): Shepherd's round trip against
  (echo round trip + raw forward), target <= 1.25x;
- P2: 64 clients of one agent, inference only: steps/s against the echo at 64 connections (>= 0.5x)
  and against P1 (>= 5x), p99 <= 20 ms;
- P3: training steps/s, PPO with 8 HTTP clients against SB3's learn() with 8 envs, DQN 4 against 4
  (>= 0.8x), same hyperparameters (RL Zoo's for CartPole);
- P4: memory of 10,000 logged-in sessions (RSS; <= 20 KB each);
- P5: the step path with 1,000,000 episode returns stored against none, and the cost of one append;
- scaling: steps/s, p99 and the server's CPU time per request at 1, 4, 16, 64, 256 clients, Shepherd and
  echo, drawn in docs/scaling.png.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, Echo, Shepherd, connect, post  # noqa: E402

PPO_PRESET = ROOT / "benchmarks" / "presets" / "perf_ppo.py"
DQN_PRESET = ROOT / "benchmarks" / "presets" / "perf_dqn.py"
WRK_SCRIPT = ROOT / "benchmarks" / "wrk" / "post.lua"
OBS = [0.01, -0.02, 0.03, 0.04]


def wrk(url: str, keys: list[str], connections: int, seconds: float, done_every: int = 0) -> dict:
    """wrk with one thread per connection (each its own session key); returns its JSON summary."""
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is needed: apt-get install -y wrk")
    with tempfile.NamedTemporaryFile("w", suffix=".keys", delete=False) as handle:
        handle.write("\n".join(keys) + "\n")
    try:
        result = subprocess.run(
            ["wrk", "-t", str(connections), "-c", str(connections), "-d", f"{max(1, round(seconds))}s", "--timeout", "30s",
             "-s", str(WRK_SCRIPT), f"{url}/shepherd/env/", "--", handle.name, str(done_every)],
            capture_output=True, text=True, timeout=seconds + 120)
    finally:
        os.unlink(handle.name)
    lines = [line for line in result.stdout.splitlines() if line.startswith('{"requests"')]
    if not lines:
        raise RuntimeError(f"wrk failed: {result.stdout[-500:]} {result.stderr[-500:]}")
    summary = json.loads(lines[-1])
    summary["per_s"] = summary["requests"] / summary["seconds"]
    if summary["non2xx"] or summary["socket_errors"]:
        print(f"  warning: {summary['non2xx']} non-2xx replies, {summary['socket_errors']} socket errors",
              file=sys.stderr)
    return summary


def sessions(url: str, apikey: str, count: int, mode: str = "evaluate") -> list[str]:
    """Log ``count`` sessions in and start an episode in each (its reset observation)."""
    connection, keys = connect(url), []
    for _ in range(count):
        key = post(connection, "/shepherd/login_user/", {"apikey": apikey, "mode": mode})["session_key"]
        post(connection, "/shepherd/env/", {"session_key": key, "obs": OBS, "reward": 0.0, "done": False})
        keys.append(key)
    connection.close()
    return keys


def forward_costs() -> dict:
    """Microseconds per call of SB3's CartPole PPO policy (the median of 7 rounds, as this machine's
    speed wanders): the raw torch forward of its actor on a ready tensor (layers and argmax), SB3's
    predict(), a raw forward of 16 observations, and Shepherd's learner's greedy batch of one."""
    import statistics

    import gymnasium as gym
    import numpy as np
    import torch as th
    from stable_baselines3 import PPO

    from shepherd.agents import build_learner
    from shepherd.spaces import parse_space

    th.set_num_threads(1)  # as Shepherd's learners run
    model = PPO("MlpPolicy", gym.make("CartPole-v1"), device="cpu")
    policy = model.policy.eval()
    learner = build_learner("PPO", "bench", parse_space([[4], "-inf", "inf"]), parse_space(2), {}, None)
    obs = np.asarray(OBS, dtype=np.float32)

    def raw(rows: int):
        tensor = th.as_tensor(np.asarray([OBS] * rows, dtype=np.float32))
        return lambda: policy.action_net(policy.mlp_extractor.forward_actor(tensor)).argmax(dim=1)

    def per_call(function, repeat=2000) -> float:
        rounds = []
        for _ in range(7):
            started = time.perf_counter()
            for _ in range(repeat):
                function()
            rounds.append((time.perf_counter() - started) / repeat * 1e6)
        return statistics.median(rounds)

    with th.inference_mode():
        raw_one, raw_sixteen = per_call(raw(1)), per_call(raw(16))
    predict = per_call(lambda: model.predict(obs, deterministic=True))
    figures = {"raw_forward_us": raw_one, "predict_us": predict, "batch16_us": raw_sixteen,
               "batch16_per_obs_us": raw_sixteen / 16}
    learner = getattr(learner, "algorithm", learner)  # (older trees: the learner itself)
    if hasattr(learner, "_greedy"):  # (older trees, measured for before-and-after figures, lack these)
        figures["shepherd_greedy_us"] = per_call(lambda: learner._greedy([obs]))
    try:
        from shepherd.agents.inline import snapshot
    except ImportError:
        pass
    else:
        greedy = snapshot(learner.model.policy, learner.observation_space)
        figures["shepherd_snapshot_us"] = per_call(lambda: greedy(obs))
    return figures


def echo_runs(seconds: float, concurrencies: list[int]) -> dict:
    results = {}
    for codec in ("std", "orjson"):
        echo = Echo(codec)
        try:
            for n in concurrencies:
                results[f"{codec}_{n}"] = measured(echo, ["-"], n, seconds)
        finally:
            echo.stop()
    return results


def measured(server, keys: list[str], connections: int, seconds: float) -> dict:
    """A wrk run, with the server's CPU time per request (what the server itself spends on one)."""
    before = server.cpu_seconds()
    summary = wrk(server.url, keys, connections, seconds)
    summary["server_cpu_us_per_request"] = (server.cpu_seconds() - before) / max(1, summary["requests"]) * 1e6
    return summary


def inference_runs(seconds: float, concurrencies: list[int], data: Path) -> dict:
    server = Shepherd(PPO_PRESET, data, "--max-sessions", "0", "--rate-limit", "0")
    try:
        keys = sessions(server.url, server.keys["perf-ppo"], max(concurrencies))
        return {str(n): measured(server, keys[:n], n, seconds) for n in concurrencies}
    finally:
        server.stop()


def training_rate(algorithm: str, clients: int, seconds: float, data: Path) -> dict:
    """Steps/s of Shepherd with ``clients`` HTTP clients and of SB3's learn() with as many envs."""
    preset = PPO_PRESET if algorithm == "PPO" else DQN_PRESET
    server = Shepherd(preset, data, "--rate-limit", "0")
    env = {**os.environ, "SHEPHERD_API_KEY": next(iter(server.keys.values())), "PYTHONPATH": str(ROOT)}
    processes = [subprocess.Popen([sys.executable, "-m", "shepherd.client", "--url", server.url, "--env",
                                   "CartPole-v1", "--seed", str(i)], env=env, stdout=subprocess.DEVNULL)
                 for i in range(clients)]
    returns = data / "agents" / "1" / "returns.jsonl"
    try:
        time.sleep(seconds / 3)  # start-up, first updates
        first = _train_steps(returns)
        started = time.monotonic()
        time.sleep(seconds)
        shepherd = (_train_steps(returns) - first) / (time.monotonic() - started)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(30)
        server.stop()
    sb3 = _sb3_learn_rate(algorithm, clients, seconds)
    return {"shepherd_steps_per_s": shepherd, "sb3_steps_per_s": sb3, "ratio": shepherd / sb3}


def _train_steps(returns: Path) -> int:
    """Steps of the episodes recorded so far (train and heatup)."""
    if not returns.exists():
        return 0
    total = 0
    for line in returns.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record["phase"] in ("train", "heatup"):
            total += record["length"]
    return total


SB3_LEARN = """
import json, sys, time
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.env_util import make_vec_env
sys.path.insert(0, {root!r})
from shepherd.agents.registry import LinearSchedule
algorithm, n_envs, seconds = {algorithm!r}, {n_envs}, {seconds}
if algorithm == "PPO":
    params = dict(n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
                  learning_rate=LinearSchedule(0.001), clip_range=LinearSchedule(0.2))
    model = PPO("MlpPolicy", make_vec_env("CartPole-v1", n_envs=n_envs, seed=0), seed=0, **params)
    chunk = n_envs * 32 * 10
else:
    params = dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000, gamma=0.99,
                  target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
                  exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256]))
    # SB3 counts train_freq in steps of the vectorised env (n_envs transitions each); Shepherd counts
    # transitions over all clients. 256 transitions between updates on both sides, as RL Zoo's one env.
    params["train_freq"] = 256 // n_envs
    model = DQN("MlpPolicy", make_vec_env("CartPole-v1", n_envs=n_envs, seed=0), seed=0, **params)
    chunk = 2560
model.learn(chunk)  # warm-up, as the Shepherd side gets
started, steps = time.monotonic(), 0
while time.monotonic() - started < seconds:
    model.learn(chunk, reset_num_timesteps=False)
    steps += chunk
print(json.dumps(steps / (time.monotonic() - started)))
"""


def _sb3_learn_rate(algorithm: str, n_envs: int, seconds: float) -> float:
    code = SB3_LEARN.format(root=str(ROOT), algorithm=algorithm, n_envs=n_envs, seconds=seconds)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=seconds * 10)
    if result.returncode:
        raise RuntimeError(result.stderr)
    return float(result.stdout.strip().splitlines()[-1])


def memory_per_session(count: int, data: Path) -> dict:
    server = Shepherd(DQN_PRESET, data, "--max-sessions", "0", "--rate-limit", "0")
    try:
        before = server.rss_mb()
        sessions(server.url, server.keys["perf-dqn"], count, mode="train")
        time.sleep(1)
        after = server.rss_mb()
    finally:
        server.stop()
    return {"sessions": count, "rss_before_mb": before, "rss_after_mb": after,
            "kb_per_session": (after - before) * 1024 / count}


def records(seconds: float, data: Path, rounds: int = 3) -> dict:
    """The step path with episodes ending every 10 steps, with no returns stored and with 1,000,000.

    Both servers run side by side and are measured in turns, ``rounds`` times each, and the round with
    the median p50 counts: this machine's speed drifts by more than the difference sought."""
    import statistics

    from shepherd.storage import EpisodeReturn, ReturnLog

    figures: dict = {}
    servers, keys, logs = {}, {}, {}
    try:
        for stored in (0, 1_000_000):
            folder = data / f"returns-{stored}"
            first = Shepherd(PPO_PRESET, folder)  # creates the store, the agent and its key
            apikey = first.keys["perf-ppo"]
            first.stop()
            log = logs[stored] = folder / "agents" / "1" / "returns.jsonl"
            log.parent.mkdir(parents=True, exist_ok=True)
            line = '{"time":1.0,"value":10.0,"length":10,"phase":"deploy"}\n'
            log.write_text(line * stored)
            servers[stored] = Shepherd(PPO_PRESET, folder, "--rate-limit", "0")
            keys[stored] = sessions(servers[stored].url, apikey, 1)
        runs: dict[int, list[dict]] = {0: [], 1_000_000: []}
        for _ in range(rounds):
            for stored, server in servers.items():
                runs[stored].append(wrk(server.url, keys[stored], 1, max(2.0, seconds / 2), done_every=10))
        for stored, measured in runs.items():
            median = statistics.median_low(run["p50_ms"] for run in measured)
            figures[f"step_{stored}"] = next(run for run in measured if run["p50_ms"] == median)
    finally:
        for server in servers.values():
            server.stop()
    for stored, log in logs.items():
        appends = ReturnLog(log)
        started = time.perf_counter()
        for _ in range(1000):
            appends.append(EpisodeReturn(1.0, 10.0, 10, "deploy"))
        figures[f"append_{stored}_us"] = (time.perf_counter() - started) / 1000 * 1e6
        appends.close()
    return figures


def chart(scaling: dict, echo: dict, path: Path) -> None:
    """Steps/s and p99 against the number of clients, Shepherd and the echo server, as a PNG. matplotlib is
    not in the test install (nothing else needs it): without it the run goes on and says so."""
    try:
        import matplotlib
    except ImportError:
        print(f"chart not drawn: matplotlib is not installed ({sys.executable} -m pip install matplotlib); "
              f"{path} is left as it was", flush=True)
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    clients = sorted(int(n) for n in scaling)
    figure, (rate, tail) = plt.subplots(1, 2, figsize=(10, 4))
    for label, runs in (("Shepherd (inference, one agent)", {n: scaling[str(n)] for n in clients}),
                        ("bare aiohttp echo (orjson)", {n: echo[f"orjson_{n}"] for n in clients})):
        rate.plot(clients, [runs[n]["per_s"] for n in clients], marker="o", label=label)
        tail.plot(clients, [runs[n]["p99_ms"] for n in clients], marker="o", label=label)
    for axes, title in ((rate, "round trips per second"), (tail, "p99 latency (ms)")):
        axes.set_xscale("log", base=2)
        axes.set_xticks(clients, [str(n) for n in clients])
        axes.set_xlabel("concurrent clients (one connection each)")
        axes.set_title(title)
        axes.grid(True, alpha=0.3)
    tail.set_yscale("log")
    rate.legend()
    figure.suptitle(f"Shepherd on {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}, wrk on loopback")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)


PARTS = ("forward", "p1", "p2", "p3", "p4", "p5", "scaling")


def run(args: argparse.Namespace) -> dict:
    data = Path(tempfile.mkdtemp(prefix="shepherd-perf-"))
    scale = [1, 4, 16, 64, 256] if "scaling" in args.only else sorted({1, 64} & {1, 64})
    need_load = {"p1", "p2", "scaling"} & set(args.only)
    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": platform.platform(),
                     "cpus": os.cpu_count(), "python": platform.python_version()}
    if need_load or "forward" in args.only:
        print("forward costs ...", flush=True)
        results["forward"] = forward_costs()
    if need_load:
        print(f"echo server at {scale} connections ...", flush=True)
        results["echo"] = echo_runs(args.seconds, scale)
        print(f"Shepherd inference at {scale} clients ...", flush=True)
        results["shepherd"] = inference_runs(args.seconds, scale, data / "inference")
    if "p3" in args.only:
        print("training: PPO 8 clients vs 8 envs, DQN 4 vs 4 ...", flush=True)
        results["p3"] = {"PPO": training_rate("PPO", 8, args.train_seconds, data / "ppo"),
                         "DQN": training_rate("DQN", 4, args.train_seconds, data / "dqn")}
    if "p4" in args.only:
        print(f"memory of {args.sessions} sessions ...", flush=True)
        results["p4"] = memory_per_session(args.sessions, data / "memory")
    if "p5" in args.only:
        print("records: the step path with 0 and 1,000,000 returns stored ...", flush=True)
        results["p5"] = records(args.seconds, data / "records")
    if "scaling" in args.only:
        chart(results["shepherd"], results["echo"], ROOT / "docs" / "scaling.png")
    shutil.rmtree(data, ignore_errors=True)
    return results


def table(results: dict) -> list[tuple[str, str, str, str]]:
    """(figure, measured, compared with, verdict) rows."""
    rows = []
    forward = results.get("forward")
    if forward:
        rows.append(("raw policy forward / predict() / raw batch of 16",
                     f"{forward['raw_forward_us']:.0f} / {forward['predict_us']:.0f} / {forward['batch16_us']:.0f} us",
                     f"{forward['batch16_per_obs_us']:.1f} us per observation in a batch" + "".join(
                         f"; {label} {forward[key]:.0f} us" for key, label in (
                             ("shepherd_greedy_us", "Shepherd's learner, greedy batch of one"),
                             ("shepherd_snapshot_us", "its numpy snapshot, one observation")) if key in forward),
                     ""))
    echo, shepherd = results.get("echo"), results.get("shepherd")
    if echo and shepherd:
        for codec in ("std", "orjson"):
            for n in sorted(int(k.split("_")[1]) for k in echo if k.startswith(codec)):
                run = echo[f"{codec}_{n}"]
                rows.append((f"echo ({codec} json), {n} connection(s)", f"{run['per_s']:,.0f}/s",
                             f"p50 {run['p50_ms']:.2f} ms, p99 {run['p99_ms']:.2f} ms", ""))
        p1, base = shepherd["1"], echo["orjson_1"]
        budget_ms = base["p50_ms"] + forward["raw_forward_us"] / 1e3
        ratio = p1["p50_ms"] / budget_ms
        rows.append(("P1 one client, inference: round trip p50", f"{p1['p50_ms']:.3f} ms ({p1['per_s']:,.0f}/s)",
                     f"echo p50 + raw forward = {budget_ms:.3f} ms: {ratio:.2f}x",
                     "met" if ratio <= 1.25 else "MISSED (target <= 1.25x)"))
        if "64" in shepherd:
            p2, echo64 = shepherd["64"], echo["orjson_64"]
            vs_echo, vs_one = p2["per_s"] / echo64["per_s"], p2["per_s"] / p1["per_s"]
            met = vs_echo >= 0.5 and vs_one >= 5 and p2["p99_ms"] <= 20
            rows.append(("P2 64 clients, one agent, inference", f"{p2['per_s']:,.0f}/s, p99 {p2['p99_ms']:.1f} ms",
                         f"{vs_echo:.2f}x echo at 64 ({echo64['per_s']:,.0f}/s), {vs_one:.1f}x one client",
                         "met" if met else "MISSED (>= 0.5x echo, >= 5x, p99 <= 20 ms)"))
        for n in sorted(int(k) for k in shepherd):
            run, base = shepherd[str(n)], echo[f"orjson_{n}"]
            rows.append((f"scaling: {n} clients", f"{run['per_s']:,.0f}/s, p99 {run['p99_ms']:.1f} ms",
                         f"echo {base['per_s']:,.0f}/s, p99 {base['p99_ms']:.1f} ms: "
                         f"{run['per_s'] / base['per_s']:.2f}x", _cpu(run, base)))
    for algorithm, figures in results.get("p3", {}).items():
        rows.append((f"P3 training {algorithm}", f"{figures['shepherd_steps_per_s']:,.0f} steps/s",
                     f"SB3 learn() {figures['sb3_steps_per_s']:,.0f} steps/s: {figures['ratio']:.2f}x",
                     "met" if figures["ratio"] >= 0.8 else "MISSED (target >= 0.8x)"))
    p4 = results.get("p4")
    if p4:
        rows.append((f"P4 memory, {p4['sessions']:,} sessions", f"{p4['kb_per_session']:.1f} KB per session",
                     f"RSS {p4['rss_before_mb']:.0f} -> {p4['rss_after_mb']:.0f} MB",
                     "met" if p4["kb_per_session"] <= 20 else "MISSED (target <= 20 KB)"))
    p5 = results.get("p5")
    if p5:
        empty, full = p5["step_0"], p5["step_1000000"]
        ratio = full["p50_ms"] / empty["p50_ms"]
        rows.append(("P5 step path (episode ends every 10 steps)",
                     f"p50 {full['p50_ms']:.3f} ms with 1,000,000 returns",
                     f"{empty['p50_ms']:.3f} ms with none: {ratio:.2f}x", "met" if ratio <= 1.1 else "MISSED"))
        rows.append(("P5 one append", f"{p5['append_1000000_us']:.1f} us with 1,000,000 stored",
                     f"{p5['append_0_us']:.1f} us with none", ""))
    return rows


def _cpu(run: dict, base: dict) -> str:
    if "server_cpu_us_per_request" not in run:
        return ""
    return (f"server CPU {run['server_cpu_us_per_request']:.0f} us/request "
            f"(echo {base['server_cpu_us_per_request']:.0f})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS), help="parts to run")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per load run (default %(default)s)")
    parser.add_argument("--train-seconds", type=float, default=30.0,
                        help="seconds of measured training per side in P3 (default %(default)s)")
    parser.add_argument("--sessions", type=int, default=10_000, help="sessions for P4 (default %(default)s)")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "perf.json",
                        help="where to write the figures (default %(default)s)")
    args = parser.parse_args()
    results = run(args)
    rows = table(results)
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    print(f"\nShepherd performance, {results['date']}, {results['machine']}, {results['cpus']} CPUs")
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
