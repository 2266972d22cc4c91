"""An image agent's greedy steps answered on the server from its greedy ONNX file, off the learner's thread.

An image agent has no numpy snapshot (`shepherd.agents.greedy_policy`: convolutions), so its learner answered
every greedy step with SB3's torch forward, queued behind its training. Its greedy ONNX file, the one front ends
answer the same steps with (`shepherd.policies.onnx_snapshot`, built by the learner once per policy version:
`shepherd.agents.export.behaviour.GREEDY_FILE`), gives the same actions (``tests/integration/test_onnx_greedy.py``)
with onnxruntime at well under half the forward's cost on this machine's cores (NatureCNN over 84x84x4: about 0.4
against 1.0 ms on one thread, benchmarks/pixel_round_trip.py). `OnnxGreedy` keeps the file of the learner's
current version loaded and answers greedy steps with it on the shared greedy threads (`greedy_pool`: a frame is
too many numbers for the event loop, issue 39's M2), each answer tagged with the version of the file that chose
it. Until the current version's file is loaded (the first steps, and after each update) the learner answers, as
before; asking makes the learner build it, as a front end's fetch does.

Only for agents without filters: a frame stack is kept per actor by the learner (the file has no input for it),
and normalisation statistics move between versions.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from typing import Any, Callable

import numpy as np

from shepherd.agents.core import WeightSource
from shepherd.policies.onnx import Policy

logger = logging.getLogger(__name__)


class OnnxGreedy:
    """Greedy actions of one agent from its greedy ONNX file at the learner's current version.

    ``build`` asks the learner for the file (`ThreadedLearner.behaviour` of `GREEDY_FILE`): a future of
    ``(version, bytes)``; ``source`` tells the learner's current version. Thread-safe.
    """

    #: answered on a worker thread whatever the batch's size (a CNN's forward is too long for the event loop)
    always_off_loop = True

    def __init__(self, build: Callable[[], Future], source: WeightSource, name: str) -> None:
        self.build = build
        self.source = source
        self.name = name
        #: the file's policy could not be built or loaded, or failed once: the learner answers from now on
        self.broken = False
        #: greedy steps (observations) this file answered, for tests and the curious
        self.answered = 0
        self._policy: Policy | None = None
        self._version = -1
        self._loading = False
        self._lock = threading.Lock()

    # -- the GreedyPolicy calls the worker makes ---------------------------------------------------------
    def ready(self, masks: list[Any] | None = None) -> bool:
        """Whether `act_batch` would answer now: the current version's file is loaded and can apply the masks
        (if any). When it is not, asking loads it (the learner builds it between two batches)."""
        policy = self._policy
        if self.broken:
            return False
        if policy is None or self._version != self.source.version:
            self.prepare()
            return False
        return masks is None or policy.takes_masks

    def prepare(self) -> None:
        """Greedy steps are coming: have the current version's file built and loaded (once at a time)."""
        with self._lock:
            if self.broken or self._loading or (self._policy is not None and self._version == self.source.version):
                return
            self._loading = True
        try:
            future = self.build()
        except Exception:  # noqa: BLE001 - the learner refused at once (closed, failed): it answers as before
            self._loading = False
            return
        future.add_done_callback(self._built)

    def act_batch(self, observations: list[Any], masks: list[Any] | None = None) -> tuple[Any, int] | None:
        """The actions (rows) for checked observations (and their masks, None for an unmasked one) and the policy
        version of the file that chose them, or None: the learner answers (nothing loaded, or it failed)."""
        with self._lock:
            policy, version = self._policy, self._version
        if policy is None or self.broken or (masks is not None and not policy.takes_masks):
            return None
        rows = None
        if masks is not None:
            width = policy.mask_size or 0
            rows = [np.ones(width, dtype=bool) if mask is None else mask for mask in masks]
        try:
            actions = policy.run(observations, rows)
        except Exception:  # a file's bug must cost speed, not the request: the learner answers it
            logger.exception("agent %s: the greedy ONNX file failed; the learner answers instead", self.name)
            self.broken = True
            return None
        with self._lock:
            self.answered += len(observations)
        return list(actions), version

    def act(self, obs: Any, mask: Any = None) -> tuple[Any, int] | None:
        """`act_batch` of one observation: its action and the version, or None."""
        answered = self.act_batch([obs], None if mask is None else [mask])
        return None if answered is None else (answered[0][0], answered[1])

    def forget(self) -> None:
        """Drop the loaded file (the learner's weights were replaced)."""
        with self._lock:
            self._policy, self._version = None, -1

    # -- loading -------------------------------------------------------------------------------------------
    def _built(self, future: Future) -> None:
        """The learner built the file (on its thread): load it on a greedy thread, not the learner's."""
        from shepherd.agents.futures import greedy_pool

        if future.cancelled() or future.exception() is not None:  # not exportable: never asked again
            logger.info("agent %s: no greedy ONNX file (%s); the learner answers its greedy steps", self.name,
                        "cancelled" if future.cancelled() else future.exception())
            self.broken = True
            self._loading = False
            return
        version, data = future.result()
        greedy_pool().submit(self._load, version, data)

    def _load(self, version: int, data: bytes) -> None:
        try:
            policy = Policy.from_bytes(data, f"agent {self.name}'s greedy file")
        except Exception:  # noqa: BLE001 - the learner keeps answering
            logger.exception("agent %s: its greedy ONNX file does not load; the learner answers instead", self.name)
            self.broken = True
            return
        finally:
            self._loading = False
        with self._lock:
            if version > self._version:
                self._policy, self._version = policy, version

