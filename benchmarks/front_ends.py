#!/usr/bin/env python
"""P2 with front ends (``run.py --front-ends K``, docs/front-ends.md): 64 clients of one agent, inference only
(sessions in evaluate mode), steps/s and p99, driven by wrk exactly as benchmarks/perf.py's P2, against the
in-process server (no front ends) and the bare aiohttp echo (benchmarks/echo_server.py), all in one run,
with the CPU time per step of the head and of the front ends (from /proc: Linux).

    .venv/bin/python benchmarks/front_ends.py                       # K = 1, 2, 4; 10 s each, 2 rounds
    .venv/bin/python benchmarks/front_ends.py --front-ends 2 --seconds 5 --rounds 1
    .venv/bin/python benchmarks/front_ends.py --envs 64 --clients 16   # V2's vector sessions instead
    .venv/bin/python benchmarks/front_ends.py --train --ray --front-ends 1 2   # training steps, learner on Ray

With ``--envs N`` every client is a vector session of N CartPoles (benchmarks/perf.py's V2: each request
one vector step), and the table counts environment steps (requests x N).

With ``--train`` the sessions are training sessions of a PPO agent with one rollout segment per client
(benchmarks/presets/perf_ppo64.py; an episode ends every 200 steps), so every step reaches the learner;
``--ray`` serves that learner from a Ray actor (run.py --ray, a local Ray). The head's CPU per step then
shows what the head spends on a training step that a front end sent it (docs/distributed.md).

Each round runs every configuration once (in alternating order, as this machine's speed wanders) and the
table shows each configuration's best round with its ratios to the in-process server and to the echo.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, Echo, Shepherd  # noqa: E402
from benchmarks.perf import PPO64_PRESET, PPO_PRESET, sessions, wrk  # noqa: E402

CLIENTS = 64


def cpu_seconds(pid: int) -> float:
    """A process's CPU time so far (user and system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def shepherd_run(data: Path, front_ends: int, seconds: float, clients: int, n_envs: int, train: bool = False,
                 ray: bool = False) -> dict:
    """One wrk run; the summary also has ``cpu_us``: each server process's CPU time per (environment) step
    during it (the head's, and the front ends' together)."""
    extra = ["--front-ends", str(front_ends)] if front_ends else []
    if n_envs:  # as benchmarks/perf.py's V2: a key's default rate limit (20,000 env steps/s) is not measured
        extra += ["--rate-limit", "0"]
    extra += ["--ray"] if ray else []
    server = Shepherd(PPO64_PRESET if train else PPO_PRESET, data, "--quiet", *extra)
    mode, done_every = ("train", 200) if train else ("evaluate", 0)
    try:
        keys = sessions(server.url, next(iter(server.keys.values())), clients, mode=mode, n_envs=n_envs)
        if not train:  # a training step cut off by the warm-up's end would wait for a rollout the others fill
            wrk(server.url, keys[:4], 4, 1, n_envs=n_envs)  # warm-up: connections, the first batches
        head = server.process.pid
        fronts = [int(pid) for pid in Path(f"/proc/{head}/task/{head}/children").read_text().split()
                  if "shepherd.front" in Path(f"/proc/{pid}/cmdline").read_text()]
        before = {pid: cpu_seconds(pid) for pid in [head, *fronts]}
        result = env_steps(wrk(server.url, keys, clients, seconds, done_every, n_envs=n_envs), n_envs)
        used = {pid: cpu_seconds(pid) - start for pid, start in before.items()}
        steps = result["per_s"] * result["seconds"]
        result["cpu_us"] = {"head": used[head] / steps * 1e6,
                            "front ends": sum(used[pid] for pid in fronts) / steps * 1e6}
        return result
    finally:
        server.stop()


def env_steps(summary: dict, n_envs: int) -> dict:
    """A wrk summary with ``per_s`` in environment steps (a vector step's request is ``n_envs`` of them)."""
    summary["per_s"] *= max(1, n_envs)
    return summary


def echo_run(seconds: float, clients: int, n_envs: int) -> dict:
    echo = Echo("orjson")
    try:
        return env_steps(wrk(echo.url, ["-"], clients, seconds, n_envs=n_envs), n_envs)
    finally:
        echo.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--front-ends", type=int, nargs="+", default=[1, 2, 4], metavar="K")
    parser.add_argument("--seconds", type=float, default=10.0, help="each wrk run (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every configuration (default %(default)s)")
    parser.add_argument("--clients", type=int, default=CLIENTS, help="wrk connections, one session each "
                        "(default %(default)s)")
    parser.add_argument("--envs", type=int, default=0, metavar="N",
                        help="vector sessions of N envs (default: single-env sessions)")
    parser.add_argument("--train", action="store_true", help="training sessions of benchmarks/presets/perf_ppo64.py "
                        "(default: evaluate-mode sessions of perf_ppo.py)")
    parser.add_argument("--ray", action="store_true", help="serve the learner from a Ray actor (run.py --ray)")
    args = parser.parse_args(argv)
    configurations = ["echo", 0, *args.front_ends]
    runs: dict[str, list[dict]] = {str(name): [] for name in configurations}
    with tempfile.TemporaryDirectory(prefix="front-ends-bench-") as folder:
        for round_index in range(args.rounds):
            order = configurations if round_index % 2 == 0 else configurations[::-1]
            for name in order:
                label = "echo" if name == "echo" else f"{name} front end(s)" if name else "in-process"
                print(f"round {round_index + 1}: {label} ...", flush=True)
                if name == "echo":
                    result = echo_run(args.seconds, args.clients, args.envs)
                else:
                    result = shepherd_run(Path(folder) / f"data-{name}-{round_index}", int(name), args.seconds,
                                          args.clients, args.envs, args.train, args.ray)
                runs[str(name)].append(result)
    best = {name: max(results, key=lambda run: run["per_s"]) for name, results in runs.items()}
    echo, single = best["echo"]["per_s"], best["0"]["per_s"]
    what = f"{args.clients} vector clients x {args.envs} envs (env steps)" if args.envs else f"{args.clients} clients"
    work = f"training{' (learner on Ray)' if args.ray else ''}" if args.train else "inference"
    print(f"\n{'V2' if args.envs else 'P2'}: {what}, one agent, {work} (best of {args.rounds} round(s) of "
          f"{args.seconds:g} s)")
    print(f"{'server':<22} {'steps/s':>9} {'p99 ms':>8} {'vs in-process':>14} {'vs echo':>8} "
          f"{'CPU us/step: head':>18} {'front ends':>11}")
    for name in configurations:
        run = best[str(name)]
        label = "echo (orjson)" if name == "echo" else f"--front-ends {name}" if name else "in-process"
        cpu = run.get("cpu_us")
        costs = "" if cpu is None else f" {cpu['head']:>18.1f} {cpu['front ends'] if name else 0:>11.1f}"
        print(f"{label:<22} {run['per_s']:>9,.0f} {run['p99_ms']:>8.1f} {run['per_s'] / single:>13.2f}x "
              f"{run['per_s'] / echo:>7.2f}x{costs}")
    out = ROOT / "benchmarks" / "results"
    out.mkdir(exist_ok=True)
    name = f"front_ends{'_vector' if args.envs else ''}{'_train' if args.train else ''}{'_ray' if args.ray else ''}"
    (out / f"{name}.json").write_text(json.dumps(
        {"date": time.strftime("%Y-%m-%d %H:%M"), "clients": args.clients, "n_envs": args.envs, "train": args.train,
         "ray": args.ray, "runs": runs},
        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
