"""A learner's own measurements: plain histograms filled on its worker thread, read at scrape time.

Nothing here knows Prometheus or HTTP: `shepherd.http.metrics` turns these numbers into metric families
when ``/metrics`` is read. Each histogram has one writer (the learner's thread), so an observation is a
bisect and three additions, with no lock; a reader on another thread sees the counts as they are at that
moment, and `Histogram.snapshot` makes them cumulative from one copy, so they never go down between buckets.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

#: seconds, for waits and forward passes (50 us .. 5 s)
LATENCY_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                   0.5, 1.0, 2.5, 5.0)
#: seconds, for training updates and checkpoints (1 ms .. 2 min)
WORK_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
#: requests in one batch
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class Histogram:
    """Counts of observations by upper bound (the last bucket, +Inf, is implicit), their sum and count."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def snapshot(self) -> tuple[list[tuple[float, int]], float]:
        """Cumulative ``(upper bound, count)`` pairs ending with ``inf`` (whose count is the total), and
        the sum: Prometheus' histogram shape."""
        counts, total = list(self.counts), self.sum
        buckets, running = [], 0
        for bound, count in zip((*map(float, self.bounds), math.inf), counts):
            running += count
            buckets.append((bound, running))
        return buckets, total


@dataclass
class LearnerStats:
    """What a `ThreadedLearner` measures on its thread.

    ``queue_wait``: from an act request's submission to the start of the batch that took it (seconds);
    ``forward``: a batch's processing, without the training updates and checkpoints it ran (seconds);
    ``batch_size``: requests per batch; ``updates``: each training update (SB3's ``train()``, seconds);
    ``checkpoints``: each checkpoint written (seconds).
    """

    queue_wait: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    forward: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    batch_size: Histogram = field(default_factory=lambda: Histogram(BATCH_BUCKETS))
    updates: Histogram = field(default_factory=lambda: Histogram(WORK_BUCKETS))
    checkpoints: Histogram = field(default_factory=lambda: Histogram(WORK_BUCKETS))
