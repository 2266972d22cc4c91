"""What writing the training metrics costs the learner: steps/s of an agent driven in-process (4 CartPole
clients through shepherd.graph.local, as the server drives it) with its metrics written and without.

Runs alternate (off, on, off, on, ...) so that machine noise hits both alike; prints each run and the
ratio of the medians. ``--every-update`` writes a row after every update (no one-second limit), the worst
case for tiny rollouts.

    PYTHONPATH=. .venv/bin/python benchmarks/metrics_overhead.py --algorithm PPO --seconds 8 --runs 3
    PYTHONPATH=. .venv/bin/python benchmarks/metrics_overhead.py --algorithm DQN
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import gymnasium as gym

from shepherd.agents import metrics as training_metrics
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.graph.local import drive, serving_here
from shepherd.storage import Store

PARAMETERS = {
    "PPO": {"n_envs": 4, "n_steps": 32, "batch_size": 64, "n_epochs": 2, "seed": 0},
    "DQN": {"learning_starts": 500, "batch_size": 32, "train_freq": 4, "seed": 0},
}


#: seconds the learner's thread spent writing rows, and rows written (of the runs with metrics on)
WRITING = [0.0, 0]


def _timed(write):
    def timed(self, now=None):
        began = time.perf_counter()
        write(self, now)
        WRITING[0] += time.perf_counter() - began
        WRITING[1] += 1
    return timed


async def run(algorithm: str, seconds: float, write: bool, data: Path) -> float:
    schedule = Schedule(heatup_steps=500 if algorithm == "DQN" else 0, checkpoint_every_seconds=3600.0,
                        checkpoint_every_steps=10 ** 9)
    graph = GraphManager(owner="bench", agents=[AgentSpec("pole", algorithm, [[4], "-inf", "inf"], 2,
                                                          dict(PARAMETERS[algorithm]))], schedule=schedule)
    store = Store(data)
    original = training_metrics.MetricsWriter.tick, training_metrics.MetricsWriter.close
    if not write:  # no row is ever written: SB3's logger only records, as before metrics existed
        training_metrics.MetricsWriter.tick = lambda self: None  # type: ignore[method-assign]
        training_metrics.MetricsWriter.close = lambda self: None  # type: ignore[method-assign]
    try:
        key = graph.create_graph(store, serving_here())["pole"]
        runtime = graph.runtime()
        stop = asyncio.Event()
        clients = [asyncio.create_task(drive(graph, key, gym.make("CartPole-v1"), seed=i, stop=stop))
                   for i in range(4)]
        await asyncio.sleep(1.0)  # warm up (and DQN's heatup)
        start_steps, start = sum(runtime.phase_steps.values()), time.perf_counter()
        await asyncio.sleep(seconds)
        rate = (sum(runtime.phase_steps.values()) - start_steps) / (time.perf_counter() - start)
        stop.set()
        await asyncio.gather(*clients)
        graph.end_sessions()
        await asyncio.to_thread(graph.close)
    finally:
        training_metrics.MetricsWriter.tick, training_metrics.MetricsWriter.close = original  # type: ignore[method-assign]
        store.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithm", default="PPO", choices=sorted(PARAMETERS))
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--every-update", action="store_true", help="a row after every update")
    args = parser.parse_args()
    if args.every_update:
        training_metrics.MetricsWriter.update_seconds = 0.0
    training_metrics.MetricsWriter.write = _timed(training_metrics.MetricsWriter.write)  # type: ignore[method-assign]
    rates: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as folder:
        for number in range(args.runs):
            for write in (False, True):
                data = Path(folder) / f"{number}-{write}"
                rate = asyncio.run(run(args.algorithm, args.seconds, write, data))
                rates[write].append(rate)
                rows = 0
                for csv_file in data.glob("agents/*/metrics/progress.csv"):
                    rows = len(csv_file.read_text().splitlines()) - 1
                print(f"run {number + 1} metrics {'on ' if write else 'off'}: {rate:8.1f} steps/s ({rows} rows)")
    off, on = statistics.median(rates[False]), statistics.median(rates[True])
    print(f"{args.algorithm}: median {off:.1f} steps/s without metrics, {on:.1f} with; on/off = {on / off:.3f}")
    spent, rows = WRITING
    print(f"writing rows: {rows} rows, {1000 * spent / max(rows, 1):.2f} ms each on the learner's thread, "
          f"{100 * spent / (args.runs * (args.seconds + 1.0)):.3f}% of the runs' time")


if __name__ == "__main__":
    main()
