#!/usr/bin/env python
"""What the event loop spends per vector step on finding numbers an off-policy agent's networks cannot take.

    .venv/bin/python benchmarks/step_checks.py                 # a few seconds
    .venv/bin/python benchmarks/step_checks.py --rounds 9 --envs 1 8 64 256

A step holding a number beyond `SUSPECT_MAGNITUDE` (1e6) is put to the learners' networks before the session counts
it (`Session._refuse_unbounded`). Whether it holds one is found where the step is checked, in the one array a box's
rows are checked in (`check_observation_rows`); the session asked each row (`suspect`, ~1 us each) before. For a
CartPole-shaped vector step of each ``--envs`` size, as a client sends it (JSON, floats written by Python's ``json``),
in one sitting, rounds alternating their order, the median of ``--rounds`` rounds, microseconds per vector step:

- ``parse``: `parse_object` and `parse_vector_step`, which now find the step's ``suspect`` too;
- ``one array``: that finding alone (`_beyond` on the rows' array: one numpy pass);
- ``row by row``: the look the session took before, `suspect` on each observation (`observations_of`), and what it
  costs as a share of the parse.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shepherd.level.base import observations_of  # noqa: E402
from shepherd.wire import parse_object, parse_vector_step  # noqa: E402
from shepherd.wire.parse import STEP_FIELDS  # noqa: E402
from shepherd.wire.observations import _beyond, suspect  # noqa: E402
from shepherd.wire.spaces import parse_space  # noqa: E402


def per_call(work: Callable[[], object], seconds: float) -> float:
    """Microseconds per call of ``work``, run for about ``seconds``."""
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(50):
            work()
        calls += 50
    return elapsed / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.3, help="per case and round")
    args = parser.parse_args()
    space = parse_space([[4], "-inf", "inf"])
    rng = np.random.default_rng(0)
    for n in args.envs:
        body = json.dumps({"session_key": "k", "seq": 1, "obs": rng.normal(size=(n, 4)).tolist(),
                           "reward": [1.0] * n, "terminated": [False] * n, "truncated": [False] * n}).encode()

        def parse() -> object:
            return parse_vector_step(parse_object(body, STEP_FIELDS), space, n, None, lambda *_: None)

        step = parse()
        rows = np.asarray(step.envs.obs)
        cases: dict[str, Callable[[], object]] = {
            "parse": parse,
            "one array": lambda: _beyond(rows),
            "row by row": lambda: any(suspect(obs) for obs in observations_of(step)),
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        order = list(cases)
        for _ in range(args.rounds):
            random.shuffle(order)
            for name in order:
                times[name].append(per_call(cases[name], args.seconds))
        median = {name: statistics.median(values) for name, values in times.items()}
        print(f"{n:>4} envs: parse {median['parse']:8.1f} us | one array {median['one array']:6.1f} us | "
              f"row by row {median['row by row']:7.1f} us ({median['row by row'] / median['parse']:.0%} of the "
              f"parse; {median['row by row'] / median['one array']:.1f}x the one array)")


if __name__ == "__main__":
    main()
