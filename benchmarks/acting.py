#!/usr/bin/env python
"""Acting at the client (issue 35) against SB3's own ``learn()``: wall time for the same number of env steps.

    .venv/bin/python benchmarks/acting.py                       # 50,000 PPO steps a run, 2 rounds, a while
    .venv/bin/python benchmarks/acting.py --steps 10000 --rounds 1 --dqn-steps 5000

Every comparison runs its sides in one sitting, alternating their order from round to round:

- PPO CartPole, RL Zoo's hyperparameters (benchmarks/presets/perf_ppo.py, presets/cartpole_ppo.py's), one
  client of 8 envs acting at the client (`ActingClient`, in this process) against SB3's ``learn()`` with 8
  envs (a process of its own, one torch thread as Shepherd's learner has);
- the same with LATENCY ms added each way by a delaying TCP proxy on loopback (a process this benchmark
  starts: every chunk read is written on after LATENCY ms, in each direction, order kept), the policy file in
  the upload's reply (``policy_in_reply``, issue 47) and fetched after each upload, beside today's
  server-acting vector client of 8 (`VectorClient`) through the same proxy;
- DQN CartPole (benchmarks/presets/perf_dqn_vec.py), one client of 4 envs, ``max_policy_lag`` 0 and 1,
  against SB3 with 4 envs;
- the head's CPU per uploaded env step: the server process's CPU time (all of it, and its event loop's
  thread alone) over a client-acting run, divided by the env steps uploaded, with JSON uploads and with binary
  ones (issue 47); ``--only head`` runs only this (PPO 1 x 8), with ``--against CHECKOUT`` alternating with a
  server run from another checkout:

    .venv/bin/python benchmarks/acting.py --only head --steps 20000 --rounds 2 --against ../wt-measure
    .venv/bin/python benchmarks/acting.py --only head --steps 20000 --rounds 1 --ray   # the learner in Ray

Shepherd's time is ``run_acting_env`` (or the vector client's loop) from login to the upload that reaches
the steps, the server already started; SB3's is ``model.learn(steps)``, the model already built. Prints one
JSON object and a table of ratios (SB3's wall time / Shepherd's: above 1 is Shepherd faster).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, Server, Shepherd, connect, metrics  # noqa: E402

PPO_PRESET = ROOT / "benchmarks" / "presets" / "perf_ppo.py"
DQN_PRESET = ROOT / "benchmarks" / "presets" / "perf_dqn_vec.py"

SB3_STEPS = """
import json, sys, time
sys.path.insert(0, {root!r})
import torch as th
th.set_num_threads(1)
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.env_util import make_vec_env
from shepherd.agents import algorithm_info, sb3_arguments
from shepherd.graph import GraphManager
from shepherd.loading.presets import load_preset
from shepherd.wire.spaces import parse_space

graph = GraphManager.of(load_preset({preset!r}))  # the hyperparameters Shepherd serves, through the same code
spec = graph.agents[0]
values = dict(spec.parameters)
values.pop("max_policy_lag", None)
if not algorithm_info(spec.algorithm).on_policy:
    values["learning_starts"] = graph.schedule.heatup_steps  # as Shepherd's heatup
kwargs, n_envs = sb3_arguments(spec.algorithm, parse_space(spec.action_space), values)
model = {{"PPO": PPO, "DQN": DQN}}[spec.algorithm]("MlpPolicy", make_vec_env("CartPole-v1", n_envs=n_envs, seed=0),
                                                 **kwargs)
started, cpu = time.monotonic(), time.process_time()
model.learn({steps})
print(json.dumps({{"wall_s": time.monotonic() - started, "steps": model.num_timesteps, "n_envs": n_envs,
                  "cpu_s": time.process_time() - cpu}}))
"""


def sb3_run(preset: Path, steps: int) -> dict:
    code = SB3_STEPS.format(root=str(ROOT), preset=str(preset), steps=steps)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=3600)
    if result.returncode:
        raise RuntimeError(result.stderr[-2000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


# --- the delaying proxy -------------------------------------------------------------------------------

async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Every chunk read is written ``delay`` seconds after it arrived, in order."""
    queue: asyncio.Queue = asyncio.Queue()

    async def later() -> None:
        loop = asyncio.get_running_loop()
        while True:
            due, data = await queue.get()
            if data is None:
                break
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    task = asyncio.ensure_future(later())
    loop = asyncio.get_running_loop()
    try:
        while data := await reader.read(1 << 16):
            queue.put_nowait((loop.time() + delay, data))
    except ConnectionError:
        pass
    queue.put_nowait((0.0, None))
    await task


async def proxy(upstream_port: int, delay: float) -> None:
    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        for sock in (writer.get_extra_info("socket"), up_writer.get_extra_info("socket")):
            sock.setsockopt(6, 1, 1)  # TCP_NODELAY
        await asyncio.gather(_pump(reader, up_writer, delay), _pump(up_reader, writer, delay),
                             return_exceptions=True)

    server = await asyncio.start_server(connection, "127.0.0.1", 0)
    print(f"proxy listening on {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


class Proxy(Server):
    """This file run as ``--proxy PORT --delay-ms D``: a loopback TCP proxy adding D ms each way."""

    def __init__(self, url: str, delay_ms: float) -> None:
        port = url.rsplit(":", 1)[1].strip("/")
        super().__init__([sys.executable, __file__, "--proxy", port, "--delay-ms", str(delay_ms)],
                         ready="proxy listening on")
        match = re.search(r"listening on (\d+)", "".join(self.lines))
        assert match is not None
        self.url = f"http://127.0.0.1:{match.group(1)}"


def round_trip_ms(url: str, count: int = 200) -> float:
    """The median time of a small request (an unknown session's logout, answered 401 at once)."""
    connection = connect(url)
    times = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            connection.request("POST", "/shepherd/logout/", b'{"session_key": "x"}', {"Content-Type": "application/json"})
            connection.getresponse().read()
            times.append(time.perf_counter() - started)
    finally:
        connection.close()
    return sorted(times)[len(times) // 2] * 1e3


# --- the Shepherd sides ---------------------------------------------------------------------------------

def acting_run(preset: Path, n_envs: int, steps: int, data: Path, delay_ms: float = 0.0, extra: tuple = (),
               root: Path = ROOT, binary: bool | None = None, in_reply: bool = True) -> dict:
    """One client of ``n_envs`` envs acting at the client until ``steps`` env steps are uploaded (the server
    run from the checkout ``root``); ``binary``: its uploads as binary tensors (None: the client's rule, JSON for
    CartPole); ``in_reply``: its login asks for the policy in the upload's reply (False: it fetches each file)."""
    from shepherd.client.acting import ActingClient, run_acting_env

    server = Shepherd(preset, data, "--rate-limit", "0", *extra, root=root)
    proxy_server = Proxy(server.url, delay_ms) if delay_ms else None
    try:
        url = proxy_server.url if proxy_server else server.url
        client = ActingClient(url, next(iter(server.keys.values())), n_envs, seed=0, binary=binary,
                              policy_in_reply=in_reply)
        threads0, cpu0 = server.thread_cpu_seconds(), server.cpu_seconds()
        started, client_cpu = time.monotonic(), time.process_time()
        run_acting_env(client, "CartPole-v1", seed=0, steps=steps)
        wall = time.monotonic() - started
        client_cpu = time.process_time() - client_cpu
        threads1, cpu1 = server.thread_cpu_seconds(), server.cpu_seconds()
        figures = metrics(server.url)
        client.logout()
        client.close()
        learned = figures.get("shepherd_agent_learned_steps", 0.0)
    finally:
        if proxy_server:
            proxy_server.stop()
        server.stop()
    loop_cpu = threads1.get(server.pid, 0.0) - threads0.get(server.pid, 0.0)
    others = {tid: threads1[tid] - threads0.get(tid, 0.0) for tid in threads1 if tid != server.pid}
    learner = max(others.values(), default=0.0)
    updates = figures.get("shepherd_training_update_duration_seconds_sum", 0.0)
    return {"wall_s": wall, "steps": steps, "learned_steps": learned, "uploads": client.seq,
            "policy_files": client.fetches, "policy_files_in_replies": client.in_reply, "client_cpu_s": client_cpu, "server_cpu_s": cpu1 - cpu0,
            "loop_cpu_s": loop_cpu, "learner_cpu_s": learner, "update_s": updates,
            "server_cpu_us_per_step": (cpu1 - cpu0) / steps * 1e6,
            "loop_cpu_us_per_step": loop_cpu / steps * 1e6,
            "learner_cpu_us_per_step": learner / steps * 1e6}


def vector_run(preset: Path, n_envs: int, steps: int, data: Path, delay_ms: float = 0.0) -> dict:
    """Today's server-acting vector client of ``n_envs`` envs for ``steps`` env steps."""
    from shepherd.client import VectorClient, first_vector_step, gymnasium_vector_step, make_vector_env
    from shepherd.client.loops import _actions

    server = Shepherd(preset, data, "--rate-limit", "0")
    proxy_server = Proxy(server.url, delay_ms) if delay_ms else None
    try:
        url = proxy_server.url if proxy_server else server.url
        client = VectorClient(url, next(iter(server.keys.values())), n_envs)
        env = make_vector_env("CartPole-v1", n_envs)
        started = time.monotonic()
        client.login()
        obs, _ = env.reset(seed=0)
        body, space, done = first_vector_step(obs, n_envs), env.single_action_space, 0
        while done < steps:
            actions = client.step(**body)
            body = gymnasium_vector_step(*env.step(_actions(space, actions)))
            done += n_envs
        client.step(**body)  # the last steps' rewards reach the server
        wall = time.monotonic() - started
        client.logout()
        client.close()
        env.close()
    finally:
        if proxy_server:
            proxy_server.stop()
        server.stop()
    return {"wall_s": wall, "steps": steps}


def local_ray_cluster():
    """A one-node Ray cluster on loopback (one logical CPU), shut down when this process exits."""
    import atexit

    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    nodes = Cluster(initialize_head=True, connect=False,
                    head_node_args={"num_cpus": 1, "include_dashboard": False, "node_ip_address": "127.0.0.1"})
    nodes.wait_for_nodes()
    atexit.register(nodes.shutdown)
    return nodes


def compare(name: str, sides: dict, rounds: int) -> list[dict]:
    """Each side once a round, in alternating order; ``sides`` maps a name to a function of the round."""
    runs = []
    for index in range(rounds):
        order = list(sides)
        if index % 2:
            order.reverse()
        run = {}
        for side in order:
            print(f"  {name}, round {index + 1}: {side} ...", file=sys.stderr, flush=True)
            run[side] = sides[side](index)
        runs.append(run)
    return runs


def _median(values: list[float]) -> float:
    values = sorted(values)
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


#: the issue's targets: SB3's wall time / Shepherd's (above 1: Shepherd faster), and the head's CPU per env step
TARGETS = {"ppo": 1.0, "latency": 0.95, "acting": 1.0, "acting_lag1": 1.2, "head_us": 5.0}
PARTS = ("ppo", "latency", "dqn", "lag", "head")


def measure(parts: list[str], steps: int = 50_000, dqn_steps: int = 20_000, rounds: int = 2,
            latency_ms: float = 1.0, cp: tuple[str, ...] = (), ray: bool = False,
            against: Path | None = None) -> dict:
    """The comparisons of ``parts`` (`PARTS`), each side in one sitting, alternating the order by round."""
    results: dict = {"steps": steps, "dqn_steps": dqn_steps, "latency_ms": latency_ms,
                     "cores": os.cpu_count(), "load_average": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="shepherd-acting-") as folder:
        data = Path(folder)

        def fresh(tag: str) -> Path:
            return data / f"{tag}-{time.monotonic_ns()}"

        if "head" in parts:
            overrides = tuple(item for value in cp for item in ("-cp", value))
            if ray:
                overrides += ("--ray", local_ray_cluster().address)
            sides = {"here": lambda i: acting_run(PPO_PRESET, 8, steps, fresh("head"), extra=overrides),
                     "binary": lambda i: acting_run(PPO_PRESET, 8, steps, fresh("head-binary"), extra=overrides,
                                                    binary=True)}
            if against is not None:
                sides["against"] = lambda i: acting_run(PPO_PRESET, 8, steps, fresh("head-against"),
                                                        extra=overrides, root=against.resolve())
            results["head"] = compare("head CPU, PPO 1 x 8", sides, rounds)
        if "ppo" in parts:
            results["ppo"] = compare("PPO 1 x 8", {
                "acting": lambda i: acting_run(PPO_PRESET, 8, steps, fresh("ppo")),
                "sb3": lambda i: sb3_run(PPO_PRESET, steps)}, rounds)
        if "latency" in parts:
            server = Shepherd(PPO_PRESET, fresh("rtt"), "--rate-limit", "0")
            proxied = Proxy(server.url, latency_ms)
            try:
                results["round_trip_ms"] = {"direct": round_trip_ms(server.url), "proxy": round_trip_ms(proxied.url)}
            finally:
                proxied.stop()
                server.stop()
            results["latency"] = compare(f"PPO 1 x 8, +{latency_ms:g} ms each way", {
                "acting": lambda i: acting_run(PPO_PRESET, 8, steps, fresh("ppo-lat"), latency_ms),
                "acting_fetching": lambda i: acting_run(PPO_PRESET, 8, steps, fresh("ppo-lat-fetch"), latency_ms,
                                                        in_reply=False),
                "vector": lambda i: vector_run(PPO_PRESET, 8, steps, fresh("vec-lat"), latency_ms),
                "sb3": lambda i: sb3_run(PPO_PRESET, steps)}, rounds)
        if "dqn" in parts or "lag" in parts:
            sides = {"sb3": lambda i: sb3_run(DQN_PRESET, dqn_steps)}
            if "dqn" in parts:
                sides["acting"] = lambda i: acting_run(DQN_PRESET, 4, dqn_steps, fresh("dqn"))
            if "lag" in parts:
                sides["acting_lag1"] = lambda i: acting_run(
                    DQN_PRESET, 4, dqn_steps, fresh("dqn-lag"),
                    extra=("-cp", "agents.perf-dqn-vec.parameters.max_policy_lag=1"))
            results["dqn"] = compare("DQN 1 x 4", sides, rounds)
    return results


def rows(results: dict) -> list[tuple[str, str, str, str]]:
    """(figure, measured, compared with, verdict) rows: each comparison's median ratio of wall times (SB3's /
    Shepherd's) with every round's, and the head's CPU per uploaded env step, against the issue's targets."""
    table = []
    names = {("ppo", "acting"): "PPO 1 x 8 acting at the client",
             ("latency", "acting"): f"PPO 1 x 8 acting at the client, the policy in the reply, "
                                    f"+{results.get('latency_ms', 0):g} ms each way",
             ("latency", "acting_fetching"): f"PPO 1 x 8 acting at the client, fetching each policy file, "
                                             f"+{results.get('latency_ms', 0):g} ms each way",
             ("latency", "vector"): f"PPO 1 x 8 server-acting vector client, +{results.get('latency_ms', 0):g} ms "
                                    "each way",
             ("dqn", "acting"): "DQN 1 x 4 acting at the client, lag 0",
             ("dqn", "acting_lag1"): "DQN 1 x 4 acting at the client, max_policy_lag 1"}
    for (part, side), name in names.items():
        runs = results.get(part) or []
        if not runs or side not in runs[0]:
            continue
        ratios = [run["sb3"]["wall_s"] / run[side]["wall_s"] for run in runs]
        target = None if side in ("vector", "acting_fetching") else TARGETS["latency" if part == "latency" else side if part == "dqn"
                                                        else "ppo"]
        verdict = "" if target is None else "met" if _median(ratios) >= target else f"MISSED (target >= {target}x)"
        table.append((f"A {name} vs SB3 learn()", f"{_median(ratios):.2f}x SB3's speed",
                      "rounds " + ", ".join(f"{ratio:.2f}" for ratio in ratios) + "; wall s "
                      + ", ".join(f"{run[side]['wall_s']:.1f}" for run in runs) + " vs "
                      + ", ".join(f"{run['sb3']['wall_s']:.1f}" for run in runs), verdict))
    for part in ("head", "ppo", "latency"):
        figures = [run[side] for run in results.get(part, []) for side in run
                   if side in ("here", "acting") and "loop_cpu_us_per_step" in run[side]]
        if not figures:
            continue
        loop = [f["loop_cpu_us_per_step"] for f in figures]
        table.append((f"A head CPU per uploaded env step ({part} runs, blocks of the preset's n_steps x 8)",
                      f"{_median(loop):.1f} us event loop", "rounds " + ", ".join(f"{value:.1f}" for value in loop)
                      + "; whole server process " + ", ".join(f"{f['server_cpu_us_per_step']:.0f}" for f in figures)
                      + " us (the learner's updates included)",
                      "met" if _median(loop) <= TARGETS["head_us"] else f"MISSED (target <= {TARGETS['head_us']:g} us)"))
    binary = [run["binary"]["loop_cpu_us_per_step"] for run in results.get("head", []) if "binary" in run]
    if binary:
        json_loop = [run["here"]["loop_cpu_us_per_step"] for run in results["head"]]
        table.append(("A head CPU per uploaded env step, binary uploads (issue 47)", f"{_median(binary):.1f} us event loop",
                      "rounds " + ", ".join(f"{value:.1f}" for value in binary) + "; JSON uploads in the same rounds "
                      + ", ".join(f"{value:.1f}" for value in json_loop),
                      "met" if _median(binary) <= TARGETS["head_us"] else f"MISSED (target <= {TARGETS['head_us']:g} us)"))
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--steps", type=int, default=50_000, help="PPO env steps a run (default %(default)s)")
    parser.add_argument("--dqn-steps", type=int, default=20_000, help="DQN env steps a run (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each comparison (default %(default)s)")
    parser.add_argument("--latency-ms", type=float, default=1.0, help="added each way (default %(default)s)")
    parser.add_argument("--only", nargs="*", default=["ppo", "latency", "dqn", "lag"], choices=PARTS)
    parser.add_argument("--cp", action="append", default=[], metavar="KEY=VALUE",
                        help="head: a -cp override for the served PPO preset (e.g. agents.perf-ppo.parameters."
                             "n_steps=128: blocks of 128 x 8)")
    parser.add_argument("--ray", action="store_true",
                        help="head: serve with run.py --ray on a local one-node Ray cluster this benchmark starts")
    parser.add_argument("--against", type=Path, default=None,
                        help="head: also serve from this checkout (another commit's worktree), alternating")
    parser.add_argument("--proxy", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--delay-ms", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.proxy is not None:
        asyncio.run(proxy(args.proxy, args.delay_ms / 1e3))
        return 0
    results = measure(args.only, args.steps, args.dqn_steps, args.rounds, args.latency_ms, tuple(args.cp), args.ray,
                      args.against)
    print(json.dumps(results, indent=1))
    print()
    for row in rows(results):
        print("  ".join(cell for cell in row if cell))
    for run in results.get("head", []):
        if "against" in run:
            print(f"head CPU per uploaded env step, against {args.against}: "
                  f"{run['against']['loop_cpu_us_per_step']:.1f} us event loop")
    return 0


if __name__ == "__main__":
    sys.exit(main())
