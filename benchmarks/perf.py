#!/usr/bin/env python
"""Shepherd's performance benchmarks: every figure of the performance targets, each compared with a
baseline measured in the same run, printed as one table and written as JSON.

    .venv/bin/python benchmarks/perf.py                  # everything, about 40 minutes on 2 cores
    .venv/bin/python benchmarks/perf.py --only p1 p2     # some of it
    .venv/bin/python benchmarks/perf.py --seconds 5      # shorter load runs
    .venv/bin/python benchmarks/perf.py --only vtrain vserve learning    # the vector steps (issue 13)

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
  echo, drawn in docs/scaling.png (when matplotlib is installed);
- vtrain (V1): training steps/s with vector clients (`shepherd.client --n-envs`): PPO with one client of 8
  envs against SB3's learn() with 8 envs, DQN with one of 4 against 4 (>= 0.9x), PPO with 8 clients of 8
  against 64 envs; Shepherd's steps/s is the agent's learned-steps counter (GET /metrics) after a warm-up,
  SB3's its num_timesteps over the same window, built from the same preset; SB3 both with one torch thread
  (as Shepherd's learner runs) and with torch's default; with where Shepherd's time went (updates, act
  batches, CPU of the event loop, the learner thread and the clients);
- vserve (V2): greedy vector steps of 16 clients x 64 CartPoles: environment steps/s against the echo's
  requests/s with the same body at 16 connections (>= 10x), p99 per request;
- learning (V3): `run.py -p cartpole_ppo --clients 1 --envs-per-client 8` until its target (evaluation
  return 475) against SB3's learn() with the same hyperparameters, 8 envs and the same evaluations;
  wall times. `--acting client`: the clients act with the policy file and upload (issue 35; <= 1.0x
  SB3's time, the median of the rounds' ratios);
- acting (issue 35, benchmarks/acting.py's comparisons): PPO CartPole, one client of 8 envs acting at the
  client against SB3's learn() with 8 envs (>= 1.0x SB3's speed), the same with 1 ms added each way by a
  delaying proxy on loopback (>= 0.95x) beside the server-acting vector client, DQN 1 x 4 with
  max_policy_lag 0 (>= 1.0x) and 1 (>= 1.2x), and the head's CPU per uploaded env step (<= 5 us; the
  server's event-loop thread over the PPO runs): --acting-steps and --acting-dqn-steps a run.
The vector parts run each comparison --rounds times (2; learning --learning-rounds, 4), alternating the
order of the sides.

Parts driven by wrk are skipped, with a line naming them, when wrk is not installed (exit status 1).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, Echo, Shepherd, connect, cpu_seconds, metrics, post  # noqa: E402

PPO_PRESET = ROOT / "benchmarks" / "presets" / "perf_ppo.py"
DQN_PRESET = ROOT / "benchmarks" / "presets" / "perf_dqn.py"
WRK_SCRIPT = ROOT / "benchmarks" / "wrk" / "post.lua"
PPO64_PRESET = ROOT / "benchmarks" / "presets" / "perf_ppo64.py"
DQN_VEC_PRESET = ROOT / "benchmarks" / "presets" / "perf_dqn_vec.py"
OBS = [0.01, -0.02, 0.03, 0.04]
WRK_MISSING = ("wrk is not installed, and the parts {parts} need it as their load generator (Debian's package: "
               "`sudo apt-get install -y wrk`; `scripts/install.sh --test` installs it)")


def wrk(url: str, keys: list[str], connections: int, seconds: float, done_every: int = 0, n_envs: int = 0) -> dict:
    """wrk with one thread per connection (each its own session key); returns its JSON summary. With
    ``n_envs`` every body is a vector step of that many CartPole observations."""
    if shutil.which("wrk") is None:
        raise SystemExit(WRK_MISSING)
    with tempfile.NamedTemporaryFile("w", suffix=".keys", delete=False) as handle:
        handle.write("\n".join(keys) + "\n")
    try:
        result = subprocess.run(
            ["wrk", "-t", str(connections), "-c", str(connections), "-d", f"{max(1, round(seconds))}s", "--timeout", "30s",
             "-s", str(WRK_SCRIPT), f"{url}/shepherd/env/", "--", handle.name, str(done_every), str(n_envs)],
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


def sessions(url: str, apikey: str, count: int, mode: str = "evaluate", n_envs: int = 0) -> list[str]:
    """Log ``count`` sessions in and start an episode in each (its reset observation); with ``n_envs``,
    vector sessions of that many envs, each env's episode started."""
    connection, keys = connect(url), []
    login = {"apikey": apikey, "mode": mode, **({"n_envs": n_envs} if n_envs else {})}
    first = ({"obs": [OBS] * n_envs, "reward": [0.0] * n_envs, "terminated": [False] * n_envs,
              "truncated": [False] * n_envs} if n_envs else {"obs": OBS, "reward": 0.0, "done": False})
    for _ in range(count):
        key = post(connection, "/shepherd/login_user/", login)["session_key"]
        post(connection, "/shepherd/env/", {"session_key": key, **first})
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
    from shepherd.wire.spaces import parse_space

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
        try:  # the greedy path takes requests since the adapter hooks (before: observations)
            from shepherd.agents.core import Kind, Request
            one: list = [Request(Kind.STEP, 1, obs)]
        except ImportError:
            one = [obs]
        figures["shepherd_greedy_us"] = per_call(lambda: learner._greedy(one))
    try:
        from shepherd.agents.greedy_policy import greedy_function
    except ImportError:
        pass
    else:
        greedy = greedy_function(learner.model.policy, learner.observation_space)
        figures["shepherd_snapshot_us"] = per_call(lambda: greedy(obs[None]))  # a batch of one row
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


def measured(server, keys: list[str], connections: int, seconds: float, n_envs: int = 0) -> dict:
    """A wrk run, with the server's CPU time per request (what the server itself spends on one)."""
    before = server.cpu_seconds()
    summary = wrk(server.url, keys, connections, seconds, n_envs=n_envs)
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
from shepherd.agents.parameters import LinearSchedule
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


# --- vector steps (issue 13): training speed, serving speed, learning ---------------------------------

#: what is read from the server's /metrics around a measured window
WINDOW_METRICS = ("shepherd_agent_learned_steps", "shepherd_training_update_duration_seconds_sum",
                  "shepherd_training_update_duration_seconds_count", "shepherd_act_latency_seconds_sum:forward",
                  "shepherd_act_latency_seconds_sum:queue_wait", "shepherd_act_latency_seconds_count:forward",
                  "shepherd_batch_size_sum", "shepherd_batch_size_count")


def _sample(server: Shepherd, clients: list[subprocess.Popen]) -> dict:
    """The counters a window is the difference of: time, the server's metrics, CPU of the server's threads
    and of the client processes."""
    figures = metrics(server.url)
    return {"time": time.monotonic(), **{name: figures.get(name, 0.0) for name in WINDOW_METRICS},
            "threads": server.thread_cpu_seconds(), "clients_cpu": sum(cpu_seconds(c.pid) for c in clients)}


def _window(first: dict, last: dict, server_pid: int) -> dict:
    """Steps/s over a window and where the server's and the clients' CPU went meanwhile (in cores: CPU
    seconds per second of the window). The event loop is the main thread; the learner is the busiest of
    the others (the rest are a few idle helper threads)."""
    wall = last["time"] - first["time"]
    delta = {name: last[name] - first[name] for name in WINDOW_METRICS}
    threads = {tid: last["threads"][tid] - first["threads"].get(tid, 0.0) for tid in last["threads"]}
    loop = threads.pop(server_pid, 0.0)
    learner = max(threads.values(), default=0.0)
    updates = delta["shepherd_training_update_duration_seconds_count"]
    acts = delta["shepherd_act_latency_seconds_count:forward"]
    return {
        "seconds": wall, "steps": delta["shepherd_agent_learned_steps"],
        "steps_per_s": delta["shepherd_agent_learned_steps"] / wall,
        "updates": updates,
        "update_ms": delta["shepherd_training_update_duration_seconds_sum"] / max(1, updates) * 1e3,
        "update_share": delta["shepherd_training_update_duration_seconds_sum"] / wall,
        "forward_share": delta["shepherd_act_latency_seconds_sum:forward"] / wall,
        "act_forward_us": delta["shepherd_act_latency_seconds_sum:forward"] / max(1, acts) * 1e6,
        "act_queue_wait_us": delta["shepherd_act_latency_seconds_sum:queue_wait"] / max(1, acts) * 1e6,
        "batch_mean": delta["shepherd_batch_size_sum"] / max(1, delta["shepherd_batch_size_count"]),
        "loop_cores": loop / wall, "learner_cores": learner / wall,
        "other_threads_cores": (sum(threads.values()) - learner) / wall,
        "clients_cores": (last["clients_cpu"] - first["clients_cpu"]) / wall,
    }


def vector_training(preset: Path, clients: int, n_envs: int, warmup: float, seconds: float, data: Path) -> dict:
    """Environment steps/s of an agent trained by ``clients`` vector clients of ``n_envs`` CartPoles each
    (`python -m shepherd.client --n-envs`, one process each): the agent's learned-steps counter (GET
    /metrics) over ``seconds``, after ``warmup`` seconds counted from its first step."""
    server = Shepherd(preset, data, "--rate-limit", "0")
    env = {**os.environ, "SHEPHERD_API_KEY": next(iter(server.keys.values())),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    errors = data / "clients.err"
    processes: list[subprocess.Popen] = []
    try:
        with errors.open("w") as stderr:
            for index in range(clients):
                processes.append(subprocess.Popen(
                    [sys.executable, "-m", "shepherd.client", "--url", server.url, "--env", "CartPole-v1",
                     "--n-envs", str(n_envs), "--seed", str(index * n_envs)],
                    env=env, stdout=subprocess.DEVNULL, stderr=stderr))
        deadline = time.monotonic() + 120
        while metrics(server.url).get("shepherd_agent_learned_steps", 0) == 0:
            if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
                raise RuntimeError(f"the clients did not start training: {errors.read_text()[-1000:]}")
            time.sleep(0.2)
        time.sleep(warmup)
        first = _sample(server, processes)
        time.sleep(seconds)
        last = _sample(server, processes)
        if any(p.poll() is not None for p in processes):
            raise RuntimeError(f"a client exited during the measurement: {errors.read_text()[-1000:]}")
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        server.stop()
    return _window(first, last, server.pid)


SB3_RATE = """
import json, sys, time
sys.path.insert(0, {root!r})
import torch as th
if {threads}:
    th.set_num_threads({threads})
from stable_baselines3 import A2C, DQN, PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from shepherd.agents import algorithm_info, sb3_arguments
from shepherd.graph import GraphManager
from shepherd.loading.presets import load_preset
from shepherd.wire.spaces import parse_space

graph = GraphManager.of(load_preset({preset!r}))  # the hyperparameters of the preset Shepherd serves, through the same code
spec = graph.agents[0]
values = dict(spec.parameters)
if not algorithm_info(spec.algorithm).on_policy:
    values["learning_starts"] = graph.schedule.heatup_steps  # as Shepherd's heatup
kwargs, n_envs = sb3_arguments(spec.algorithm, parse_space(spec.action_space), values)
model = {{"PPO": PPO, "A2C": A2C, "DQN": DQN}}[spec.algorithm](
    "MlpPolicy", make_vec_env("CartPole-v1", n_envs=n_envs, seed=0), **kwargs)
warmup, seconds, spent, calls = {warmup}, {seconds}, [0.0], [0]
train = model.train

def timed_train(*args, **kwargs):
    started = time.perf_counter()
    train(*args, **kwargs)
    spent[0] += time.perf_counter() - started
    calls[0] += 1

model.train = timed_train

class Window(BaseCallback):
    first = start = end = None

    def _on_step(self):
        now = time.monotonic()
        if self.first is None:
            self.first = now
        elif self.start is None and now - self.first >= warmup:
            self.start = (now, self.num_timesteps, spent[0], time.process_time(), calls[0])
        elif self.start is not None and now - self.start[0] >= seconds:
            self.end = (now, self.num_timesteps, spent[0], time.process_time(), calls[0])
            return False
        return True

window = Window()
model.learn(10 ** 9, callback=window)
(t0, n0, s0, c0, u0), (t1, n1, s1, c1, u1) = window.start, window.end
wall = t1 - t0
print(json.dumps({{"steps_per_s": (n1 - n0) / wall, "seconds": wall, "n_envs": n_envs,
                  "torch_threads": th.get_num_threads(), "update_share": (s1 - s0) / wall,
                  "update_ms": (s1 - s0) / max(1, u1 - u0) * 1e3, "cores": (c1 - c0) / wall}}))
"""


def sb3_training(preset: Path, warmup: float, seconds: float, threads: int) -> dict:
    """Environment steps/s of SB3's ``learn()`` with the preset's hyperparameters and its ``n_envs`` CartPoles
    in a ``DummyVecEnv``, in a process of its own, over ``seconds`` after ``warmup`` seconds; ``threads``
    is torch's thread count (0: torch's default, as a user's script gets)."""
    code = SB3_RATE.format(root=str(ROOT), preset=str(preset), warmup=warmup, seconds=seconds, threads=threads)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=warmup + seconds + 300)
    if result.returncode:
        raise RuntimeError(result.stderr[-2000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


#: the vector training comparisons: (name, preset, clients, envs per client, target ratio or None)
VECTOR_TRAINING = (("PPO 1 client x 8 envs", PPO_PRESET, 1, 8, 0.9),
                   ("DQN 1 client x 4 envs", DQN_VEC_PRESET, 1, 4, 0.9),
                   ("PPO 8 clients x 8 envs", PPO64_PRESET, 8, 8, None))


def vector_training_runs(rounds: int, warmup: float, seconds: float, data: Path) -> dict:
    """Each comparison ``rounds`` times, alternating the order of its three runs (Shepherd, SB3 with one
    torch thread as Shepherd's learner has, SB3 with torch's default threads) from round to round."""
    results = {}
    for name, preset, clients, n_envs, target in VECTOR_TRAINING:
        runs = []
        for index in range(rounds):
            order = ["shepherd", "sb3_1_thread", "sb3_default_threads"]
            if index % 2:
                order.reverse()
            run: dict = {}
            for side in order:
                print(f"  {name}, round {index + 1}: {side.replace('_', ' ')} ...", flush=True)
                if side == "shepherd":
                    run[side] = vector_training(preset, clients, n_envs, warmup, seconds,
                                                data / f"{preset.stem}-{index}")
                else:
                    run[side] = sb3_training(preset, warmup, seconds, 1 if side == "sb3_1_thread" else 0)
            runs.append(run)
        results[name] = {"clients": clients, "n_envs": n_envs, "target": target, "rounds": runs}
    return results


def vector_serving(rounds: int, seconds: float, data: Path, clients: int = 16, n_envs: int = 64) -> dict:
    """Greedy vector steps (sessions in evaluate mode) of ``clients`` connections x ``n_envs`` CartPoles
    against the orjson echo server given the same bodies at as many connections, in alternating turns."""
    echo = Echo("orjson")
    server = Shepherd(PPO_PRESET, data, "--rate-limit", "0")
    try:
        keys = sessions(server.url, server.keys["perf-ppo"], clients, n_envs=n_envs)
        runs = []
        for index in range(rounds):
            run = {}
            for side in (("echo", "shepherd") if index % 2 == 0 else ("shepherd", "echo")):
                target, target_keys = (echo, ["-"]) if side == "echo" else (server, keys)
                run[side] = measured(target, target_keys, clients, seconds, n_envs=n_envs)
            runs.append(run)
    finally:
        server.stop()
        echo.stop()
    return {"clients": clients, "n_envs": n_envs, "rounds": runs}


SB3_LEARNING = """
import json, sys, time
started = time.monotonic()
sys.path.insert(0, {root!r})
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from shepherd.agents import sb3_arguments
from shepherd.graph import GraphManager
from shepherd.loading.presets import load_preset
from shepherd.wire.spaces import parse_space

graph = GraphManager.of(load_preset({preset!r}))
spec, schedule, validation = graph.agents[0], graph.schedule, graph.validation
kwargs, n_envs = sb3_arguments(spec.algorithm, parse_space(spec.action_space), dict(spec.parameters))
model = PPO("MlpPolicy", make_vec_env(validation.env_id, n_envs={n_envs}, seed=0), **kwargs)
evaluation_env = make_vec_env(validation.env_id, n_envs=1, seed=1000)
every, episodes = schedule.steps_between_evaluation_periods, schedule.evaluation_episodes

class Evaluate(BaseCallback):
    next, evaluations, reached = every, [], None

    def _on_step(self):
        if self.num_timesteps < self.next:
            return True
        self.next += every
        returns, _ = evaluate_policy(model, evaluation_env, n_eval_episodes=episodes, deterministic=True,
                                     return_episode_rewards=True)
        mean = sum(returns) / len(returns)
        self.evaluations.append((self.num_timesteps, mean))
        if mean >= validation.target_return:
            self.reached = (self.num_timesteps, mean, time.monotonic() - started)
            print(f"target reached: evaluation {{len(self.evaluations)}} at {{self.num_timesteps}} steps returned "
                  f"{{mean:.1f}}", flush=True)
            return False
        return True

callback = Evaluate()
model.learn(validation.max_steps, callback=callback)
print(json.dumps({{"reached": callback.reached is not None, "evaluations": callback.evaluations,
                  "steps": callback.reached[0] if callback.reached else model.num_timesteps,
                  "seconds_to_target": callback.reached[2] if callback.reached else None}}))
"""


def _timed_lines(command: list[str], timeout: float, env: dict | None = None) -> tuple[int, float, list]:
    """Run a command, stopped (SIGTERM, then SIGKILL) after ``timeout`` seconds; its exit status, wall time,
    and its output lines, each with the seconds since the start."""
    import threading

    started = time.monotonic()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=env)

    def stop() -> None:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()

    watchdog = threading.Timer(timeout, stop)
    watchdog.start()
    lines = []
    try:
        for line in process.stdout:
            lines.append((time.monotonic() - started, line.rstrip()))
        process.wait()
    finally:
        watchdog.cancel()
        process.stdout.close()
    if time.monotonic() - started >= timeout:
        lines.append((time.monotonic() - started, f"(stopped after {timeout:g} s)"))
    return process.returncode, time.monotonic() - started, lines


def _evaluations(data: Path, envs_per_period: int) -> list[float]:
    """The mean return of each evaluation period of the data folder's agent, from its returns log."""
    values = []
    for path in data.glob("agents/*/returns.jsonl"):
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("phase") == "evaluate":
                values.append(record["value"])
    return [sum(values[i:i + envs_per_period]) / envs_per_period
            for i in range(0, len(values) - envs_per_period + 1, envs_per_period)]


def learning_runs(rounds: int, data: Path, preset: str = "cartpole_ppo", envs: int = 8, acting: str = "server"
                  ) -> dict:
    """``run.py -p cartpole_ppo --clients 1 --envs-per-client 8 [--acting client]`` until its target against
    SB3's ``learn()`` with the preset's hyperparameters, its envs and its evaluations (every 5,000 steps, 5 greedy
    episodes, the target 475), each in a process of its own, in alternating order; wall times of the
    whole commands and until the line saying the target was reached."""
    from shepherd.loading.presets import load_preset, preset_path

    path = preset_path(preset)
    timeout = load_preset(preset).validation.timeout_seconds + 120
    runs = []
    for index in range(rounds):
        run = {}
        for side in (("shepherd", "sb3") if index % 2 == 0 else ("sb3", "shepherd")):
            print(f"  round {index + 1}: {side} ...", flush=True)
            if side == "shepherd":
                command = [sys.executable, str(ROOT / "run.py"), "-p", preset, "--clients", "1",
                           "--envs-per-client", str(envs), "--acting", acting, "--port", "0",
                           "--data", str(data / f"learning-{index}")]
            else:
                command = [sys.executable, "-c", SB3_LEARNING.format(root=str(ROOT), preset=str(path), n_envs=envs)]
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
            code, wall, lines = _timed_lines(command, timeout, env)
            reached = next(((at, text) for at, text in lines if text.startswith("target reached")), None)
            steps = re.search(r" at (\d+) steps", reached[1]) if reached else None
            run[side] = {"exit": code, "wall_s": wall, "reached": reached is not None,
                         "to_target_s": reached[0] if reached else None,
                         "steps": int(steps.group(1)) if steps else None,
                         "line": reached[1] if reached else lines[-1][1] if lines else ""}
            if side == "shepherd":  # when it served (start-up done), and its evaluations' mean returns
                run[side]["serving_s"] = next((at for at, text in lines if text.startswith("Stop with Ctrl-C")), None)
                run[side]["evaluations"] = _evaluations(data / f"learning-{index}", envs_per_period=5)
            else:
                result = json.loads(lines[-1][1]) if lines and lines[-1][1].startswith("{") else {}
                run[side]["evaluations"] = [mean for _, mean in result.get("evaluations", [])]
        runs.append(run)
    return {"preset": preset, "envs_per_client": envs, "acting": acting, "rounds": runs}


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


PARTS = ("forward", "p1", "p2", "p3", "p4", "p5", "scaling", "vtrain", "vserve", "learning", "acting")
#: the parts whose load generator is wrk
WRK_PARTS = ("p1", "p2", "p5", "scaling", "vserve")


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
    if "vtrain" in args.only:
        print(f"training with vector clients ({args.rounds} rounds each, {args.warmup_seconds:g} s warm-up, "
              f"{args.train_seconds:g} s measured): Shepherd, SB3 with 1 torch thread, SB3 with torch's default ...",
              flush=True)
        results["vtrain"] = vector_training_runs(args.rounds, args.warmup_seconds, args.train_seconds,
                                                 data / "vtrain")
    if "vserve" in args.only:
        print(f"greedy vector steps, 16 clients x 64 envs, against the echo with the same body "
              f"({args.rounds} rounds) ...", flush=True)
        results["vserve"] = vector_serving(args.rounds, args.seconds, data / "vserve")
    if "learning" in args.only:
        print(f"learning: run.py -p cartpole_ppo --clients 1 --envs-per-client 8 --acting {args.acting} against "
              f"SB3 learn() ({args.learning_rounds} rounds) ...", flush=True)
        results["learning"] = learning_runs(args.learning_rounds, data / "learning", acting=args.acting)
    if "acting" in args.only:
        from benchmarks import acting

        print(f"acting at the client: PPO 1 x 8 ({args.acting_steps} steps, also with +1 ms each way), DQN 1 x 4 "
              f"({args.acting_dqn_steps} steps, lag 0 and 1) against SB3 learn() ({args.rounds} rounds) ...",
              flush=True)
        results["acting"] = acting.measure(["ppo", "latency", "dqn", "lag"], args.acting_steps,
                                           args.acting_dqn_steps, args.rounds)
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
    rows.extend(vector_rows(results))
    if "acting" in results:
        from benchmarks import acting

        rows.extend(acting.rows(results["acting"]))
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


def _median(values) -> float:
    import statistics

    return statistics.median(values)


def _each(values, form: str = "{:,.0f}") -> str:
    return " / ".join(form.format(value) for value in values)


def vector_rows(results: dict) -> list[tuple[str, str, str, str]]:
    """The rows of the vector parts: medians over the rounds, each round's figure after them."""
    rows = []
    for name, comparison in results.get("vtrain", {}).items():
        runs, target = comparison["rounds"], comparison["target"]
        ours = [run["shepherd"]["steps_per_s"] for run in runs]
        one = [run["sb3_1_thread"]["steps_per_s"] for run in runs]
        default = [run["sb3_default_threads"]["steps_per_s"] for run in runs]
        best = [ours_ / max(a, b) for ours_, a, b in zip(ours, one, default)]
        threads = runs[0]["sb3_default_threads"]["torch_threads"]
        envs = comparison["clients"] * comparison["n_envs"]
        verdict = ""
        if target is not None:
            met = sum(ratio >= target for ratio in best)
            verdict = ("met" if met == len(best) else f"met in {met} of {len(best)} rounds" if met
                       else f"MISSED (target >= {target}x the faster SB3)")
        rows.append((f"V1 training {name}", f"{_median(ours):,.0f} steps/s ({_each(ours)})",
                     f"SB3 learn() {envs} envs: 1 thread {_median(one):,.0f}/s ({_each(one)}), "
                     f"{threads} threads {_median(default):,.0f}/s ({_each(default)}); Shepherd / SB3 1 thread "
                     f"{_each([a / b for a, b in zip(ours, one)], '{:.2f}x')}, / SB3 {threads} threads "
                     f"{_each([a / b for a, b in zip(ours, default)], '{:.2f}x')}", verdict))
        window = [run["shepherd"] for run in runs]
        rows.append(("   where Shepherd's time went",
                     f"updates {_median([w['update_ms'] for w in window]):.0f} ms each, "
                     f"{_median([w['update_share'] for w in window]):.0%} of the time; "
                     f"act batch of {_median([w['batch_mean'] for w in window]):.1f}, "
                     f"forward {_median([w['act_forward_us'] for w in window]):.0f} us, "
                     f"queue wait {_median([w['act_queue_wait_us'] for w in window]):.0f} us",
                     f"cores: event loop {_median([w['loop_cores'] for w in window]):.2f}, learner "
                     f"{_median([w['learner_cores'] for w in window]):.2f}, clients "
                     f"{_median([w['clients_cores'] for w in window]):.2f}; SB3's train(): 1 thread "
                     f"{_median([run['sb3_1_thread'].get('update_ms', 0) for run in runs]):.0f} ms, "
                     f"{_median([run['sb3_1_thread']['update_share'] for run in runs]):.0%} of its time; "
                     f"{threads} threads {_median([run['sb3_default_threads'].get('update_ms', 0) for run in runs]):.0f} ms, "
                     f"{_median([run['sb3_default_threads']['update_share'] for run in runs]):.0%}", ""))
    serve = results.get("vserve")
    if serve:
        n, clients = serve["n_envs"], serve["clients"]
        ours = [run["shepherd"] for run in serve["rounds"]]
        echo = [run["echo"] for run in serve["rounds"]]
        ratios = [a["per_s"] * n / b["per_s"] for a, b in zip(ours, echo)]
        met = sum(ratio >= 10 for ratio in ratios)
        rows.append((f"V2 greedy vector steps, {clients} clients x {n} envs",
                     f"{_median([r['per_s'] * n for r in ours]):,.0f} env steps/s "
                     f"({_each([r['per_s'] * n for r in ours])}); {_median([r['per_s'] for r in ours]):,.0f} "
                     f"requests/s, p99 {_each([r['p99_ms'] for r in ours], '{:.1f}')} ms",
                     f"echo, same body, {clients} connections: {_median([r['per_s'] for r in echo]):,.0f} "
                     f"requests/s ({_each([r['per_s'] for r in echo])}), p99 "
                     f"{_each([r['p99_ms'] for r in echo], '{:.1f}')} ms: {_each(ratios, '{:.1f}x')}; "
                     f"server CPU {_median([r['server_cpu_us_per_request'] for r in ours]):,.0f} us/request "
                     f"(echo {_median([r['server_cpu_us_per_request'] for r in echo]):,.0f})",
                     "met" if met == len(ratios) else f"met in {met} of {len(ratios)} rounds" if met
                     else "MISSED (target >= 10x)"))
    learning = results.get("learning")
    if learning:
        runs = learning["rounds"]

        def side(name: str) -> str:
            done = [run[name] for run in runs if run[name]["reached"]]
            text = (f"median {_median([r['to_target_s'] for r in done]):.0f} s to the target "
                    f"({_each([r['to_target_s'] for r in done], '{:.0f}')} s; "
                    f"{_each([r['steps'] for r in done])} steps)" if done else "")
            missed = len(runs) - len(done)
            return text + (f"; {missed} of {len(runs)} rounds did not reach it" if missed else "")

        ratios = [run["shepherd"]["to_target_s"] / run["sb3"]["to_target_s"] for run in runs
                  if run["shepherd"]["reached"] and run["sb3"]["reached"]]
        reached = sum(run["shepherd"]["reached"] for run in runs)
        verdict = "reached" if reached == len(runs) else f"reached in {reached} of {len(runs)} rounds"
        if learning.get("acting") == "client" and ratios:  # issue 35: no slower to the target than SB3
            verdict += ", met" if _median(ratios) <= 1.0 else f", MISSED (median {_median(ratios):.2f}x, target <= 1.0x)"
        rows.append((f"V3 learning: run.py -p {learning['preset']} --clients 1 --envs-per-client "
                     f"{learning['envs_per_client']} --acting {learning.get('acting', 'server')}", side("shepherd"),
                     f"SB3 learn(), {learning['envs_per_client']} envs, same evaluations: {side('sb3')}"
                     + (f"; Shepherd/SB3 {_each(ratios, '{:.2f}x')}" if ratios else ""), verdict))
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
                        help="seconds of measured training per side in P3 and vtrain (default %(default)s)")
    parser.add_argument("--warmup-seconds", type=float, default=10.0,
                        help="seconds of training before vtrain's measurement, per side (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds of each vector comparison of vtrain and vserve, alternating the order of "
                             "the sides (default %(default)s)")
    parser.add_argument("--learning-rounds", type=int, default=4,
                        help="rounds of the learning comparison, alternating the order of the sides; each "
                             "side's network starts from another random seed in each (default %(default)s)")
    parser.add_argument("--acting", choices=["server", "client"], default="server",
                        help="learning: where the local clients' policy acts (run.py --acting; issue 35's "
                             "figure is --acting client, <= 1.0x SB3's wall time to the target)")
    parser.add_argument("--acting-steps", type=int, default=20_000,
                        help="acting: PPO env steps a run (default %(default)s)")
    parser.add_argument("--acting-dqn-steps", type=int, default=8_000,
                        help="acting: DQN env steps a run (default %(default)s)")
    parser.add_argument("--sessions", type=int, default=10_000, help="sessions for P4 (default %(default)s)")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "perf.json",
                        help="where to write the figures (default %(default)s)")
    args = parser.parse_args()
    skipped = [part for part in args.only if part in WRK_PARTS] if shutil.which("wrk") is None else []
    if skipped:
        print(WRK_MISSING.format(parts=", ".join(skipped)) + "; they are skipped, the others run.", flush=True)
        args.only = [part for part in args.only if part not in skipped]
    results = run(args)
    rows = table(results)
    if skipped:
        rows.append((f"not run: {', '.join(skipped)}", "wrk is not installed", "", "NOT RUN"))
        results["not_run"] = {"parts": skipped, "reason": "wrk is not installed"}
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    print(f"\nShepherd performance, {results['date']}, {results['machine']}, {results['cpus']} CPUs")
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    print(f"figures written to {args.json}")
    if skipped:
        print(WRK_MISSING.format(parts=", ".join(skipped)) + ": they were not run.")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
