"""One learner's checkpoints: when the next is due (every so many steps or seconds; retried less and less often
while writes fail), the one pending, the last good one, and the agent's last activity stored with each."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable

from shepherd.agents import ServedLearner
from shepherd.graph.schedule import Schedule

logger = logging.getLogger(__name__)

#: the longest wait between two tries of a checkpoint that keeps failing (the wait doubles from 2 s)
CHECKPOINT_RETRY_MAX_SECONDS = 300.0


class Checkpoints:
    """The checkpoints of one learner, written at ``path()`` with the state the runtime gives (`write`).

    Runs on the graph's thread, but a write's completion (`_done`), which runs on the learner's thread and
    stores the agent's last activity there (``store_activity``), so the store's rewrite never blocks the loop.
    """

    def __init__(self, learner: ServedLearner, path: Callable[[], Path], schedule: Schedule, label: str,
                 store_activity: Callable[[float], Any], last_active: float) -> None:
        self.learner = learner
        self.path = path
        self.schedule = schedule
        self.label = label
        self.failures = 0  # failed writes in a row (a full disk, a read-only folder)
        self.failures_total = 0  # failed writes since this runtime started
        self.error: str | None = None  # why the last write failed, while they fail
        #: wall time of the last checkpoint written (the loaded one's file time after a resume; None: none yet)
        self.last_good: float | None = None
        self.pending: Future | None = None  # the last checkpoint queued, done or not (None before the first)
        self.last_active = last_active  # wall time of the agent's last step; stored at each checkpoint
        self._stored_last_active = last_active
        self._store_activity = store_activity
        self._activity_lock = threading.Lock()
        self._last = (time.monotonic(), 0)  # when the last write was queued, and at how many steps
        #: state a checkpoint keeps changed since the last write without a step counted (a self-play
        #: environment's ratings, kept by its first agent while another team learns): due by time as steps are
        self.changed = False
        self._retry_at = 0.0

    def due(self, steps: int) -> bool:
        """Whether a checkpoint is due at ``steps`` steps: every ``checkpoint_every_steps`` or
        ``checkpoint_every_seconds``; while writes fail, retried less and less often as learning goes on."""
        last_time, last_steps = self._last
        changed = steps > last_steps or self.changed
        if self.failures:
            return changed and time.monotonic() >= self._retry_at
        return steps - last_steps >= self.schedule.checkpoint_every_steps or (
            changed and time.monotonic() - last_time >= self.schedule.checkpoint_every_seconds)

    def write(self, steps: int, state: dict[str, Any]) -> Future:
        """Queue a checkpoint at ``steps`` steps on the learner's thread; it sees every step handed over before it."""
        self._last, self.changed = (time.monotonic(), steps), False
        future = self.learner.checkpoint(self.path(), state)
        future.add_done_callback(self._done)
        self.pending = future
        return future

    def failed(self, steps: int, error: BaseException) -> Future:
        """A checkpoint at ``steps`` that failed before it could be queued (a file it names could not be written):
        reported and retried as a failed write is."""
        self._last, self.changed = (time.monotonic(), steps), False
        future: Future = Future()
        future.set_exception(error)
        self._done(future)
        self.pending = future
        return future

    def resumed(self, steps: int) -> None:
        """The learner was restored from the checkpoint at ``path()``, at ``steps`` steps."""
        self._last = (time.monotonic(), steps)
        try:
            self.last_good = self.path().stat().st_mtime
        except OSError:
            pass

    def _done(self, future: Future) -> None:
        error = future.exception()
        if error is not None:
            self.failures += 1
            self.failures_total += 1
            self.error = f"{type(error).__name__}: {error}"
            delay = min(CHECKPOINT_RETRY_MAX_SECONDS, 2.0 ** self.failures)
            self._retry_at = time.monotonic() + delay
            logger.error("agent %s: checkpoint failed (%d in a row; retried in %g s): %s", self.label,
                         self.failures, delay, error)
            return
        if self.failures:
            logger.info("agent %s: checkpoint written again after %d failures", self.label, self.failures)
        self.failures, self.error = 0, None
        self.last_good = time.time()
        self.store_last_active()

    def store_last_active(self) -> None:
        """Store the agent's last activity if it changed since it was last stored."""
        with self._activity_lock:
            last_active = self.last_active
            if last_active == self._stored_last_active:
                return
            try:
                self._store_activity(last_active)
                self._stored_last_active = last_active
            except Exception as error:  # noqa: BLE001 - the checkpoint itself is written; report and go on
                logger.error("agent %s: storing its last activity failed: %s", self.label, error)

    def age(self) -> float | None:
        """Seconds since the last checkpoint was written (None: none yet)."""
        return None if self.last_good is None else max(0.0, time.time() - self.last_good)

    def trouble(self) -> str | None:
        """Why the checkpoints are failing, with the age of the last good one; None while they are written."""
        if not self.failures:
            return None
        age = self.age()
        last = "no checkpoint written yet" if age is None else f"the last good one is {age:.0f} s old"
        return (f"{self.failures} checkpoint write(s) failed in a row ({self.error}); {last}; learning goes on "
                "and the write is retried")
