#!/usr/bin/env python
"""What an agent's filters are worth: a preset learning with them and without, alternately, over seeds.

    .venv/bin/python benchmarks/filters.py                        # cartpole_sensors_ppo, 3 seeds each way
    .venv/bin/python benchmarks/filters.py --preset zoo:ppo/Acrobot-v1 --agent ppo-Acrobot-v1 \
        --budget 300000 -cp schedule.steps_between_evaluation_periods=10000

Each run is ``run.py -p PRESET --clients N --seed S`` in its own process, on 127.0.0.1 (a free port), with a
temporary data folder; "without" adds ``-cp agents.AGENT.filters.normalize_observations=false`` and
``...normalize_rewards=false``. The two runs of one seed follow each other, so both see the machine's load of
that moment. It prints each run's steps to the preset's target (its validation) and wall time, the medians,
and the ratio without/with. A run that does not reach the target within the preset's ``max_steps`` counts as
not reached (shown as such; its steps are the budget, a lower bound).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REACHED = re.compile(r"target reached: evaluation \d+ at (\d+) steps")
NOT_REACHED = re.compile(r"target not reached within (\d+) steps")


def run(preset: str, clients: int, seed: int, overrides: list[str], budget: int | None) -> tuple[int, bool, float]:
    """Steps at which the target was reached (or the budget, when it was not), whether it was, and the wall
    time of one run."""
    with tempfile.TemporaryDirectory(prefix="shepherd-filters-") as data:
        command = [sys.executable, str(ROOT / "run.py"), "-p", preset, "--clients", str(clients), "--port", "0",
                   "--data", data, "--seed", str(seed), "--quiet"]
        for override in overrides:
            command += ["-cp", override]
        if budget:
            command += ["-cp", f"schedule.improve_steps={budget}", "-cp", f"validation.max_steps={budget}"]
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, timeout=1800, cwd=ROOT)
        took = time.perf_counter() - started
    found = REACHED.search(done.stdout) or NOT_REACHED.search(done.stdout)
    if found is None:
        sys.exit(f"run.py failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return int(found.group(1)), found.re is REACHED, took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cartpole_sensors_ppo")
    parser.add_argument("--agent", default="cartpole_sensors", help="the preset's agent whose filters are turned off")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--budget", type=int, default=None, help="training steps per run (default: the preset's)")
    parser.add_argument("-cp", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="an override for both runs, as run.py takes it (repeat for more)")
    args = parser.parse_args()
    off = [f"agents.{args.agent}.filters.normalize_observations=false",
           f"agents.{args.agent}.filters.normalize_rewards=false"]
    results: dict[str, list[tuple[int, bool, float]]] = {"with": [], "without": []}
    print(f"{args.preset}, {args.clients} clients; steps to the target (wall seconds)")
    for seed in range(1, args.seeds + 1):
        for label, overrides in (("with", args.overrides), ("without", args.overrides + off)):
            steps, reached, took = run(args.preset, args.clients, seed, overrides, args.budget)
            results[label].append((steps, reached, took))
            shown = f"{steps:,}" if reached else f"not in {steps:,}"
            print(f"  seed {seed} {label:>7} filters: {shown:>12} ({took:.0f} s)", flush=True)
    medians = {}
    for label, runs in results.items():
        steps = [s for s, _, _ in runs]  # a run that did not reach the target counts its whole budget
        reached = sum(r for _, r, _ in runs)
        medians[label] = statistics.median(steps)
        print(f"{label:>7} filters: median {medians[label]:,.0f} steps (min {min(steps):,}, max {max(steps):,}), "
              f"reached {reached}/{len(runs)}, median wall {statistics.median(t for _, _, t in runs):.0f} s")
    print(f"without/with: {medians['without'] / medians['with']:.2f}x the steps")


if __name__ == "__main__":
    main()
