#!/usr/bin/env python
"""How the learners' training throughput on Ray scales with the cores Ray is given.

Part 3 of benchmarks/ray_learners.py, also runnable alone:

    .venv/bin/python benchmarks/ray_cores.py                 # about 4 minutes: 1, 2, 1, 2 cores
    .venv/bin/python benchmarks/ray_cores.py --rounds 3 --seconds 40

Four learner-bound CartPole PPO agents (benchmarks/presets/ray4_heavy.py: a 512x512 network, 40 epochs of
minibatches of 64 per rollout of 256 steps), one client process each, served by ``run.py --ray ADDRESS``
joined to a Ray node of its own (started here as ``run.py --ray`` starts one, ``ray_cluster.connect``: on
127.0.0.1, token authentication, no dashboard). The Ray node's processes (GCS, raylet and the learner
actors' workers, which inherit it) are started with a CPU affinity of 1 core or of 2 cores
(``os.sched_setaffinity``); the head (``run.py``) and the clients are not restricted, in either setting.
Settings alternate (1, 2, 1, 2, ...), each with a fresh node, server and clients.

Each trial reports training steps/s and SB3 updates/s (``train()`` calls) over the window, the CPU the
node's processes, the head and the clients used (in cores), the machine's load (busy cores from
/proc/stat, over the window) and, from inside every learner actor (``actor.__ray_call__``): its pid, its
affinity and torch's intra-op thread count; from /proc, the affinity of every thread of the node's
processes and how many threads of each actor did its work (used a tenth or more of its CPU). Prints one
JSON object with every trial, the medians and the ratios 2 cores / 1 core: of steps/s, of updates/s, and
of the cores the node's processes actually got (on a shared machine, fewer than they were allowed).

Ray runs its workers 15 steps of ``nice`` below the raylet (``worker_niceness``); here they run at the
head's and the clients' priority (``RAY_worker_niceness=0``), so that the learners are not the first to
yield to other work on a shared machine.

Figures (22:30 UTC, ``benchmarks/ray_learners.py`` with its defaults; 2 cores shared with four other
engineers, load average 3.9 to 4.9; the head and the clients on the same two cores):

    Ray node allowed   steps/s per trial   median   updates/s   cores the node got   steps/core-second
    1 core             122.8, 122.8        122.8    0.480       0.98                 125.8
    2 cores            178.8, 190.5        184.7    0.759       1.48                 124.3
    2 / 1                                  1.50     1.58        1.52                 0.99

Throughput follows the cores the learners get (the same steps per core-second); 2 cores give 1.5x, not
2x, because the head and the clients (about 0.45 of a core) and the machine's other work share the second
core. At load averages of 7 to 31 two earlier runs gave 1.64 and 0.91: the node then got 0.4 to 1.25
cores whatever it was allowed. docs/distributed.md discusses them.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, Shepherd, cpu_seconds, metrics, stop_process, terminate_all  # noqa: E402

PRESET = ROOT / "benchmarks" / "presets" / "ray4_heavy.py"
UPDATES = "shepherd_training_update_duration_seconds_count"
UPDATE_SECONDS = "shepherd_training_update_duration_seconds_sum"


# -- run in the Ray node's own process (``ray_cores.py node``) ------------------------------------------------
def serve_node() -> int:
    """A local Ray node as ``run.py --ray`` starts one, kept until SIGTERM; prints its address."""
    from shepherd.agents.ray import cluster as ray_cluster

    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda number, frame: stopping.append(number))
    ray_cluster.connect(None)
    import ray

    print("ray node at", ray.get_runtime_context().gcs_address, flush=True)
    while not stopping:
        time.sleep(0.2)
    ray_cluster.disconnect()
    return 0


def report_actors(address: str) -> int:
    """``ray_cores.py actors ADDRESS``: from inside each learner actor, its pid, affinity and torch's threads."""
    import ray

    ray.init(address=address, namespace="shepherd", log_to_driver=False, configure_logging=False)

    def inside(actor: object) -> dict:
        import torch

        return {"pid": os.getpid(), "affinity": sorted(os.sched_getaffinity(0)),
                "torch_threads": torch.get_num_threads(), "torch_interop_threads": torch.get_num_interop_threads(),
                "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}

    names = sorted(entry["name"] for entry in ray.util.list_named_actors(all_namespaces=True)
                   if entry["namespace"] == "shepherd" and entry["name"].startswith("shepherd-learner/"))
    found = {name: ray.get(ray.get_actor(name).__ray_call__.remote(inside), timeout=60) for name in names}
    ray.shutdown()
    print(json.dumps(found))
    return 0


# -- the benchmark ----------------------------------------------------------------------------------------------
def descendants(pid: int) -> list[int]:
    """The process ``pid`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def threads(pid: int) -> dict[int, float]:
    """CPU seconds of each thread of a process (empty once it is gone)."""
    try:
        return {int(task.name): cpu_seconds(pid, int(task.name)) for task in Path(f"/proc/{pid}/task").iterdir()}
    except OSError:
        return {}


def thread_name(pid: int, tid: int) -> str:
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
    except OSError:
        return "?"


def thread_affinities(pids: list[int]) -> list[str]:
    """The distinct CPU lists the threads of these processes may run on."""
    lists = set()
    for pid in pids:
        try:
            for task in Path(f"/proc/{pid}/task").iterdir():
                for line in (task / "status").read_text().splitlines():
                    if line.startswith("Cpus_allowed_list:"):
                        lists.add(line.split(":", 1)[1].strip())
        except OSError:
            pass
    return sorted(lists)


def busy_cores() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine so far, from /proc/stat."""
    fields = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields[:8]) - idle, sum(fields[:8])


class RayNode:
    """A Ray node in its own process (``ray_cores.py node``) whose processes may run on ``cores`` only."""

    def __init__(self, cores: set[int], env: dict[str, str], log: Path) -> None:
        with log.open("w") as errors:  # Ray's own messages (its SIGTERM notice at the end)
            self.process = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "node"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                stderr=errors, text=True, preexec_fn=lambda: os.sched_setaffinity(0, cores))
        line = self.process.stdout.readline()
        if not line.startswith("ray node at "):
            self.stop()
            raise RuntimeError(f"the Ray node did not start: {line!r}\n{log.read_text()[-3000:]}")
        self.address = line.split()[-1]

    def stop(self) -> None:
        stop_process(self.process, 60)


def trial(cores: set[int], seconds: float, warmup: float) -> dict:
    """One setting: a fresh Ray node on ``cores``, the head and four clients unrestricted; the window's figures."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # loopback addresses, as ray_cluster.connect sets
           # Ray runs its workers 15 steps nicer than the raylet: on a shared machine the learners would get
           # what everyone else leaves; here they run at the head's and the clients' priority
           "RAY_worker_niceness": "0"}
    with TemporaryDirectory() as folder:
        node = RayNode(cores, env, Path(folder) / "node.log")
        try:
            first, last, inside, affinities = measure(node, Path(folder) / "data", env, seconds, warmup)
        finally:
            node.stop()
    elapsed = last["time"] - first["time"]
    busy = (last["busy"][0] - first["busy"][0]) / (last["busy"][1] - first["busy"][1]) * (os.cpu_count() or 1)
    per_thread = [{tid: (last["threads"][actor["pid"]].get(tid, cpu) - cpu) / elapsed
                   for tid, cpu in first["threads"][actor["pid"]].items()} for actor in inside.values()]
    return {
        "ray_cores": sorted(cores),
        "steps_per_second": round((last["steps"] - first["steps"]) / elapsed, 1),
        # per core the node's processes got: what the same work costs, whatever share of the cores it got
        "steps_per_ray_core_second": round((last["steps"] - first["steps"]) / max(1e-9, sum(
            max(0.0, last["cpu"]["ray_node"].get(pid, cpu) - cpu) for pid, cpu in first["cpu"]["ray_node"].items())), 1),
        "updates_per_second": round((last["updates"] - first["updates"]) / elapsed, 3),
        "update_seconds_mean": round((last["update_seconds"] - first["update_seconds"])
                                     / max(1.0, last["updates"] - first["updates"]), 3),
        "cpu_cores_used": {name: round(sum(max(0.0, last["cpu"][name].get(pid, cpu) - cpu)
                                           for pid, cpu in first["cpu"][name].items()) / elapsed, 2)
                           for name in first["cpu"]},
        "machine_busy_cores": round(busy, 2),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "actors": {  # each learner actor: what it said of itself; its threads' CPU over the window (/proc)
            "affinity": sorted({str(actor["affinity"]) for actor in inside.values()}),
            "torch_threads": sorted({actor["torch_threads"] for actor in inside.values()}),
            "omp_num_threads": sorted({str(actor["omp_num_threads"]) for actor in inside.values()}),
            # threads that used a tenth or more of their process's CPU: one means the work is on one thread
            "busy_threads": [sum(share >= 0.1 * sum(shares.values()) > 0 for share in shares.values())
                             for shares in per_thread],
            "busiest_thread_cores": [round(max(shares.values(), default=0.0), 2) for shares in per_thread],
            "busy_thread_names": sorted({name for actor, shares in zip(inside.values(), per_thread)
                                         for tid, share in shares.items() if share >= 0.1 * sum(shares.values()) > 0
                                         for name in [last["names"][actor["pid"]].get(tid, "?")]}),
            "process_cores": [round(sum(shares.values()), 2) for shares in per_thread]},
        "node_thread_affinities": affinities,
    }


def measure(node: RayNode, data: Path, env: dict[str, str], seconds: float,
            warmup: float) -> tuple[dict, dict, dict, list[str]]:
    """The head joined to ``node`` and four clients: samples before and after the window, what the actors
    said of themselves, and the CPU lists of the node's threads."""
    server = Shepherd(PRESET, data, "--quiet", "--ray", node.address, env=env)
    clients: list[subprocess.Popen] = []
    try:
        for index, key in enumerate(server.keys.values()):
            clients.append(subprocess.Popen(
                [sys.executable, "-m", "shepherd.client", "--url", server.url, "--env", "CartPole-v1",
                 "--seed", str(index)], cwd=ROOT, stdout=subprocess.DEVNULL, env={**env, "SHEPHERD_API_KEY": key}))
        started = time.monotonic()  # the actors' report (a Ray driver of its own) is part of the warm-up
        inside = json.loads(subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "actors", node.address], cwd=ROOT, env=env,
            capture_output=True, text=True, check=True, timeout=120).stdout)
        time.sleep(max(0.0, warmup - (time.monotonic() - started)))
        pids = {"ray_node": descendants(node.process.pid), "head": [server.pid],
                "clients": [process.pid for process in clients]}
        actor_pids = [actor["pid"] for actor in inside.values()]
        first = window_sample(server, pids, actor_pids)
        time.sleep(seconds)
        last = window_sample(server, pids, actor_pids)
        return first, last, inside, thread_affinities(descendants(node.process.pid))
    finally:
        terminate_all(clients)
        server.stop()


def window_sample(server: Shepherd, pids: dict[str, list[int]], actor_pids: list[int]) -> dict:
    figures = metrics(server.url)
    return {
        "time": time.monotonic(), "busy": busy_cores(),
        "steps": figures.get("shepherd_agent_steps_total", 0.0), "updates": figures.get(UPDATES, 0.0),
        "update_seconds": figures.get(UPDATE_SECONDS, 0.0),
        "cpu": {name: {pid: cpu_seconds(pid) for pid in group} for name, group in pids.items()},
        "threads": {pid: threads(pid) for pid in actor_pids},
        "names": {pid: {tid: thread_name(pid, tid) for tid in threads(pid)} for pid in actor_pids},
    }


def scaling(rounds: int, seconds: float, warmup: float) -> dict:
    """1 core, 2 cores, 1 core, 2 cores, ... (``rounds`` of each); every trial, medians and ratios."""
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) < 2:
        raise SystemExit("the cores comparison needs at least 2 cores")
    settings = {"1": set(usable[-1:]), "2": set(usable[-2:])}
    trials: dict[str, list[dict]] = {"1": [], "2": []}
    for _ in range(rounds):
        for name, cores in settings.items():
            trials[name].append(trial(cores, seconds, warmup))
            run = trials[name][-1]
            print(f"ray on {name} core(s): {run['steps_per_second']} steps/s, {run['updates_per_second']} updates/s,"
                  f" the node got {run['cpu_cores_used']['ray_node']} cores", file=sys.stderr, flush=True)
    result: dict = {"cores": os.cpu_count(), "preset": PRESET.name, "seconds": seconds, "trials": trials}
    for key in ("steps_per_second", "updates_per_second", "ray_node_cores_used", "steps_per_ray_core_second"):
        medians = {name: statistics.median(figure(run, key) for run in runs) for name, runs in trials.items()}
        result[f"median_{key}"] = {f"{name}_core": value for name, value in medians.items()}
        result[f"{key}_ratio_2_to_1"] = round(medians["2"] / medians["1"], 2) if medians["1"] else None
    return result


def figure(run: dict, key: str) -> float:
    return run["cpu_cores_used"]["ray_node"] if key == "ray_node_cores_used" else run[key]


def main() -> int:
    if sys.argv[1:2] == ["node"]:
        return serve_node()
    if sys.argv[1:2] == ["actors"]:
        return report_actors(sys.argv[2])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="trials of each setting (default %(default)s)")
    parser.add_argument("--seconds", type=float, default=25.0, help="each measured window (default %(default)s)")
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds before each window (default %(default)s)")
    args = parser.parse_args()
    print(json.dumps(scaling(args.rounds, args.seconds, args.warmup), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
