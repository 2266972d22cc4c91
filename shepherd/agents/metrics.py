"""Training metrics: each learner's SB3 logger, written as CSV and TensorBoard event files.

SB3's ``train()`` records its values (``train/loss``, ``train/entropy_loss``, ``train/approx_kl``, DQN's
``rollout/exploration_rate``, SAC's ``train/ent_coef`` ...) into the model's logger; SB3's own ``learn()``
loop dumps them, and Shepherd does not run that loop, so `MetricsWriter` dumps them on the learner's thread,
with Shepherd's own values beside them (``shepherd/...``: steps per second, sessions, phase, the learner's
batch processing time, requests per batch; ``rollout/ep_rew_mean`` from the clients' training episodes).

When a row is written (``MetricsWriter.tick``, after every batch and when the learner is idle):

- an on-policy learner writes one after each training update, as SB3's ``learn()`` does with
  ``log_interval=1``, but at most one a second (``update_seconds``): tiny rollouts would otherwise write
  rows faster than anyone reads them, and an update's values then wait for the next row;
- otherwise (off-policy learners, which train every few steps, and any learner in heatup or evaluation)
  a row every ``every_seconds`` (5 s) while steps of training are served (heatup and training steps, or any
  step during an evaluation period), with the last update's values; steps of evaluate-mode sessions alone
  (phase ``deploy``: ``run.py --evaluate``, or clients logged in with ``"mode": "evaluate"``) write none;
- a last row when the learner stops.

The files are opened at the first row, so an agent that never learns writes none. The CSV is appended to
across restarts of the server (SB3's writer would start it again); TensorBoard starts an event file per
run in the same folder, which it reads as one run. A failure to write (a full disk) is logged once and
stops the metrics, never the learner.
"""

from __future__ import annotations

import csv
import logging
import math
import os
import time
from pathlib import Path
from typing import Any, BinaryIO, Callable, Protocol

from stable_baselines3.common.logger import CSVOutputFormat, Logger, TensorBoardOutputFormat, filter_excluded_keys

from shepherd.storage.files import PRIVATE_FILE, atomic_write, make_private, private_folder
from shepherd.storage.metrics import PROGRESS_FILE

logger = logging.getLogger(__name__)

#: what the graph adds to a row (the phase, sessions, steps of every phase, training returns); called on
#: the learner's thread, so it only reads plain values
GraphValues = Callable[[], dict[str, Any]]
#: the graph's value that steps per second are counted from: steps served in every phase
SERVED_STEPS = "shepherd/served_steps"
#: the graph's steps counted toward its schedule (heatup and training), and its phase
SCHEDULE_STEPS = "shepherd/steps"
PHASE = "shepherd/phase"


class _Learner(Protocol):
    """What `attach` needs of a learner: its algorithm, its measurements and a place for the writer."""

    algorithm: Any
    stats: Any
    metrics: MetricsWriter | None


class AppendingCSV(CSVOutputFormat):
    """SB3's CSV format, appending to an existing file (whose header it keeps) instead of emptying it, and
    widening it for new columns into a new file renamed over it (SB3 rewrites it in place: a crash meanwhile
    left rows cut and columns shifted, and a reader of the curve saw them so)."""

    def __init__(self, path: Path) -> None:  # SB3's opens with "w+", which would empty the file
        keys, keep = _existing(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
        os.ftruncate(fd, keep)
        self.path = path
        self.file = os.fdopen(fd, "r+", encoding="utf-8")
        self.file.seek(0, os.SEEK_END)
        self.keys: list[str] = keys
        self.separator, self.quotechar = ",", '"'

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, tuple[str, ...]], step: int = 0) -> None:
        new = [key for key in filter_excluded_keys(key_values, key_excluded, "csv") if key not in self.keys]
        if new:
            self._widen(new)
        super().write(key_values, key_excluded, step)  # a row of known columns: appended

    def _widen(self, keys: list[str]) -> None:
        """Add columns: the header and every row so far (the new columns empty), as SB3 writes them."""
        self.file.seek(0)
        rows = self.file.readlines()[1:]
        columns = self.keys + keys
        padding = self.separator * len(keys)

        def write(handle: BinaryIO) -> None:
            handle.write((",".join(columns) + "\n").encode())
            for row in rows:
                handle.write((row[:-1] + padding + "\n").encode())

        atomic_write(self.path, write)
        self.file.close()
        self.file = open(self.path, "r+", encoding="utf-8")
        self.file.seek(0, os.SEEK_END)
        self.keys = columns


def _existing(path: Path) -> tuple[list[str], int]:
    """The columns of an existing CSV and how many of its bytes to keep: up to its last whole row (a run
    that stopped in the middle of one leaves the rest); ``([], 0)`` when there is not even a header."""
    try:
        with open(path, "rb") as raw:
            header = raw.readline()
            if not header.endswith(b"\n"):
                return [], 0
            size = raw.seek(0, os.SEEK_END)
            start = max(len(header), size - 64 * 1024)
            raw.seek(start)
            tail = raw.read()
    except FileNotFoundError:
        return [], 0
    cut = tail.rfind(b"\n")
    return next(csv.reader([header.decode()])), (start + cut + 1 if cut >= 0 else len(header))


class MetricsWriter:
    """Dumps one learner's SB3 logger, with Shepherd's values, into a folder; used on the learner's thread
    only (`tick`, `close`), except `follow`, which the graph calls before the learner starts."""

    #: an on-policy learner's rows: one after each update, at most one in this many seconds
    update_seconds = 1.0
    #: rows while steps are served without an on-policy update (off-policy, heatup, evaluation)
    every_seconds = 5.0

    def __init__(self, folder: Path, sb3_logger: Logger, algorithm: Any, stats: Any, on_policy: bool) -> None:
        self.folder = folder
        self.logger = sb3_logger
        self._graph: GraphValues | None = None
        self._algorithm = algorithm
        self._stats = stats
        self._on_policy = on_policy
        self._opened = False
        self._failed = False
        self._started = time.monotonic()
        self._last_row = -math.inf
        self._version = self._current_version()
        self._steps = self._served_steps(None)
        self._schedule_steps = 0
        self._previous = self._totals()

    def follow(self, graph_values: GraphValues) -> None:
        """Add the graph's values to every row (before the learner starts)."""
        self._graph = graph_values
        self._steps = self._served_steps(None)
        self._schedule_steps = int(graph_values().get(SCHEDULE_STEPS, 0))

    # -- on the learner's thread ---------------------------------------------------------------
    def tick(self) -> None:
        """Write a row if one is due (see the module's docstring); cheap when none is."""
        now = time.monotonic()
        since = now - self._last_row
        if since < self.update_seconds or self._failed:
            return
        if self._on_policy and self._current_version() != self._version:
            self.write(now)
        elif since >= self.every_seconds and (self._current_version() != self._version or self._moved()):
            self.write(now)

    def write(self, now: float | None = None) -> None:
        """Record Shepherd's values and dump the logger as one row, stepped at SB3's ``num_timesteps``."""
        now = time.monotonic() if now is None else now
        try:
            graph = self._graph() if self._graph is not None else {}
            self._record(now, graph)
            if not self._opened:
                self._open()
            self.logger.dump(int(getattr(self._algorithm, "steps", 0)))
        except Exception:  # noqa: BLE001 - metrics must never take the learner down
            logger.exception("learner %s: metrics are not written any more", getattr(self._algorithm, "name", "?"))
            self._failed = True
            self.close()

    def close(self) -> None:
        """A last row if anything happened since the previous one, then close the files."""
        if self._opened and not self._failed and (self._current_version() != self._version or self._moved()):
            self.write()
        if self._opened:
            self.logger.close()
            self._opened = False

    # -- the row -------------------------------------------------------------------------------
    def _open(self) -> None:
        private_folder(self.folder)
        self.logger.output_formats = [AppendingCSV(self.folder / PROGRESS_FILE),
                                      TensorBoardOutputFormat(str(self.folder))]
        for events in self.folder.glob("events.out.tfevents.*"):  # TensorBoard's, made with the umask's mode
            make_private(events, PRIVATE_FILE)
        self._opened = True

    def _record(self, now: float, graph: dict[str, Any]) -> None:
        record = self.logger.record
        elapsed = max(now - (self._last_row if math.isfinite(self._last_row) else self._started), 1e-9)
        steps = self._served_steps(graph)
        record("time/total_timesteps", int(getattr(self._algorithm, "steps", 0)))
        record("time/time_elapsed", int(now - self._started))
        record("shepherd/steps_per_second", round((steps - self._steps) / elapsed, 2))
        record("shepherd/policy_version", self._current_version())
        totals = self._totals()
        previous, self._previous = self._previous, totals
        forward, batches, waits, acts, updates, updating = (b - a for a, b in zip(previous, totals))
        if batches:
            record("shepherd/act_latency_ms", round(1000 * forward / batches, 4))
            record("shepherd/batch_size", round(acts / batches, 3))
        if acts:
            record("shepherd/queue_wait_ms", round(1000 * waits / acts, 4))
        if updates:
            record("shepherd/update_ms", round(1000 * updating / updates, 3))
        for key, value in graph.items():
            if key == "shepherd/phase":  # a text: in the CSV and the API, not among TensorBoard's scalars
                record(key, value, exclude="tensorboard")
            elif value is not None:
                record(key, value)
        self._steps, self._version, self._last_row = steps, self._current_version(), now
        self._schedule_steps = int(graph.get(SCHEDULE_STEPS, self._schedule_steps))

    def _totals(self) -> tuple[float, ...]:
        stats = self._stats
        if stats is None:
            return (0.0,) * 6
        # batches are counted by their forward time; act requests by the batch sizes' sum
        return (stats.forward.sum, stats.forward.count, stats.queue_wait.sum, stats.batch_size.sum,
                stats.updates.count, stats.updates.sum)

    def _current_version(self) -> int:
        return int(getattr(self._algorithm, "version", 0))

    def _served_steps(self, graph: dict[str, Any] | None) -> int:
        if graph and SERVED_STEPS in graph:
            return int(graph[SERVED_STEPS])
        if self._graph is not None and graph is None:
            return int(self._graph().get(SERVED_STEPS, 0))
        return int(getattr(self._algorithm, "steps", 0))

    def _moved(self) -> bool:
        """Whether steps of training were served since the last row: without the graph's values (a learner
        alone), any step; with them, steps counted toward the schedule, or any step of an evaluation period, but
        not steps of evaluate-mode sessions alone (an evaluate-only run writes no training metrics)."""
        if self._graph is None:
            return self._served_steps(None) != self._steps
        graph = self._graph()
        if int(graph.get(SCHEDULE_STEPS, 0)) != self._schedule_steps:
            return True
        return graph.get(PHASE) == "evaluate" and self._served_steps(graph) != self._steps


def attach(learner: _Learner, folder: Path) -> MetricsWriter:
    """Give a learner (not yet started) SB3's logger and a `MetricsWriter` writing into ``folder``.

    The one set-up every learner calls, a pooled agent's or a per-client one's: SB3's ``train()`` records
    into the model's logger from now on, and the learner's thread writes rows (`MetricsWriter.tick`).
    A learner whose model is in another process (a `RayLearner`) has none here: its algorithm says whether
    it is on-policy (``on_policy``), and it records its model's values into the writer's logger itself.
    """
    sb3_logger = Logger(folder=str(folder), output_formats=[])  # the files open at the first row
    model = getattr(learner.algorithm, "model", None)
    if model is not None:
        model.set_logger(sb3_logger)
    on_policy = getattr(learner.algorithm, "on_policy", None)
    if not isinstance(on_policy, bool):
        on_policy = is_on_policy(model)
    writer = MetricsWriter(folder, sb3_logger, learner.algorithm, learner.stats, on_policy)
    learner.metrics = writer
    return writer


def is_on_policy(model: Any) -> bool:
    """Whether an SB3 model learns on-policy (from rollouts): its metrics rows follow its updates."""
    return model is not None and hasattr(model, "rollout_buffer")
