"""SB3's training values of a learner in a Ray actor, carried to the head's `MetricsWriter` on its replies.

In-process, SB3's ``train()`` records into the logger that `MetricsWriter` dumps (`metrics.attach`). In a
`LearnerActor` the model records into a `RecordingLogger` instead, which keeps what was recorded since the
last reply; each reply takes it (`RecordingLogger.take`: plain values by key, nothing torch) and the head
records it into its writer's logger (`replay`), where the writer's rules (a row per on-policy update, the
last update's values otherwise) apply as in-process. The actor writes no files.

This module imports no ray: the actor's side and the head's are plain SB3 loggers.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from stable_baselines3.common.logger import Logger

from shepherd.agents.metrics import MetricsWriter

logger = logging.getLogger(__name__)

#: what crosses to the head: key -> (value, the output formats it is excluded from), as SB3's logger keeps it
Recorded = dict[str, tuple[bool | int | float | str, tuple[str, ...]]]


class RecordingLogger(Logger):
    """The actor's SB3 logger: what the model records (on the learner's thread) is kept until the next
    reply takes it (on the actor's call thread), as SB3's ``dump`` would clear it; it writes nothing."""

    def __init__(self) -> None:
        super().__init__(folder=None, output_formats=[])
        self._lock = threading.Lock()

    def record(self, key: str, value: Any, exclude: str | tuple[str, ...] | None = None) -> None:
        with self._lock:
            super().record(key, value, exclude)

    def record_mean(self, key: str, value: float | None, exclude: str | tuple[str, ...] | None = None) -> None:
        with self._lock:
            super().record_mean(key, value, exclude)

    def dump(self, step: int = 0) -> None:
        """Nothing: the head writes the rows (`take` clears what was recorded)."""

    def take(self) -> Recorded:
        """What was recorded since the last call, as plain values (others, an image or a video, are left
        out), and forget it."""
        with self._lock:
            values, excluded = dict(self.name_to_value), dict(self.name_to_excluded)
            self.name_to_value.clear()
            self.name_to_count.clear()
            self.name_to_excluded.clear()
        recorded: Recorded = {}
        for key, value in values.items():
            simple = plain(value)
            if simple is not None:
                recorded[key] = (simple, tuple(excluded.get(key, ("",))))
        return recorded


def plain(value: Any) -> bool | int | float | str | None:
    """``value`` as a Python scalar (a numpy or torch scalar's ``item()``), or None if it is none."""
    if isinstance(value, (bool, int, float, str)):
        return value
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        item = value.item()
        if isinstance(item, (bool, int, float, str)):
            return item
    return None


def record_in(learner: Any) -> RecordingLogger | None:
    """Give a learner's model (not yet started) a `RecordingLogger`; None if it has no model."""
    model = getattr(learner.algorithm, "model", None)
    if model is None:
        return None
    recording = RecordingLogger()
    model.set_logger(recording)
    return recording


def replay(writer: MetricsWriter | None, recorded: Recorded) -> None:
    """Record what the actor's model recorded into the head's writer, as the model records in-process:
    the writer's next row carries it (a later value of the same key replaces it before that)."""
    if writer is None:
        return
    for key, (value, excluded) in recorded.items():
        writer.logger.record(key, value, excluded)
