"""The actor side of ``run.py --ray``: `LearnerActor`, one agent's `ThreadedLearner` in a Ray actor, and
`Reply`, what each of its calls returns to the head's `RayLearner` (`shepherd.agents.ray.learner`).

The actor builds the ordinary learner with the registry's factory (`learner_for`), runs it with its answers
relayed back (`ThreadedLearner.relay`) instead of set on futures, and returns plain data only: answers,
counters, measurements, what its SB3 logger recorded (`shepherd.agents.ray.metrics`), checkpoint bytes and,
when asked, its published weights with its observation statistics. It writes no files of the agent's:
checkpoints (the zip and its replay buffer) go to the head as bytes, where the store is.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray

from shepherd.agents import checkpoint as checkpoint_format
from shepherd.agents.core import Answer, VersionedWeights
from shepherd.agents.ray.advice import advice_status, apply_advice
from shepherd.agents.ray.metrics import Recorded, RecordingLogger, record_in
from shepherd.agents.export.behaviour import NotActableAtClient
from shepherd.agents.factories import learner_for
from shepherd.agents.timing import LearnerStats
from shepherd.agents.worker import ThreadedLearner
from shepherd.definition import AgentDefinition

#: the Ray namespace of every Shepherd actor
NAMESPACE = "shepherd"
#: how long building (or rebuilding) an actor's learner may take (seconds)
BUILD_SECONDS = 300.0


@dataclass(frozen=True)
class Reply:
    """What one remote call to a `LearnerActor` returns: plain data."""

    answers: list[Answer]
    version: int
    steps: int
    failure: str | None
    stats: LearnerStats
    #: per control of the call, in order: a checkpoint's files (`checkpoint.read_files`), a behaviour file's
    #: ``(version, bytes)``, None (done),
    #: or an error's text (a `NotActableAtClient` itself)
    controls: list[Any] = field(default_factory=list)
    weights: VersionedWeights | None = None
    #: the learner's filter statistics (`Filtering.state`) as ``weights`` were sent: the head's greedy snapshot
    #: normalises observations with them (None: no weights sent, or no observation normalisation)
    filters: dict[str, Any] | None = None
    #: what the model's SB3 logger recorded since the last reply (``train/loss``, ...), for the head's metrics
    recorded: Recorded = field(default_factory=dict)


class LearnerActor:
    """One agent's `ThreadedLearner` in a Ray actor. Calls arrive one at a time (the actor's own queue)."""

    def __init__(self) -> None:
        self._learner: ThreadedLearner | None = None
        self._recording: RecordingLogger | None = None
        self._answers: list[Answer] = []
        self._ready = threading.Condition()
        self._folder = Path(tempfile.mkdtemp(prefix="shepherd-learner-"))
        self._written = 0

    def build(self, definition: AgentDefinition, values: dict[str, Any], total_steps: int | None,
              checkpoint: dict[str, bytes] | None, start: bool, versions_after: int | None = None) -> dict[str, Any]:
        """Build the learner (the registry's factory), restore ``checkpoint`` if given, number its policy
        versions past ``versions_after`` (an actor replacing a lost one: `SB3Algorithm.number_versions_after`),
        start it if asked; returns the state saved with the checkpoint (empty without one).

        Raises:
            ParameterError: the agent cannot be built; whatever restoring raised.
        """
        learner = learner_for(definition, values, total_steps)
        learner.greedy = None  # the head answers greedy steps from its own snapshot
        learner.relay = self._collect
        self._recording = record_in(learner)  # what train() records goes to the head with each reply
        self._learner = learner
        state = self.restore(checkpoint) if checkpoint is not None else {}
        number = getattr(learner.algorithm, "number_versions_after", None)
        if versions_after is not None and number is not None:
            number(versions_after)
        if start:
            self.start()
        return state

    def restore(self, files: dict[str, bytes]) -> dict[str, Any]:
        """Restore the checkpoint the head sent (`checkpoint.read_files`: the zip and its replay buffer)."""
        path = self._folder / "restore" / checkpoint_format.MODEL_FILE
        checkpoint_format.write_files(path, files)
        try:
            return self._built.restore(path)
        finally:
            shutil.rmtree(path.parent, ignore_errors=True)

    def start(self) -> None:
        self._built.start(None)

    def start_from(self, weights: bytes) -> None:
        """Start an advised client's learner from another client's checkpoint (before `start`)."""
        path = self._folder / "start-from.zip"
        path.write_bytes(weights)
        algorithm: Any = self._built.algorithm  # an advised adapter (the head sends this to no other)
        try:
            algorithm.start_from(path)
        finally:
            path.unlink()

    def advisor_weights(self, after: int) -> tuple[VersionedWeights | None, dict[str, Any] | None]:
        """What an advisee's actor reads of this one as its advisor: the published weights if newer than
        ``after`` (asking makes the learner publish at its next batch), and its filter statistics."""
        algorithm: Any = self._built.algorithm
        published = algorithm.latest_weights()
        return (published if published is not None and published.version > after else None), filters_of(algorithm)

    def advice_status(self) -> dict[str, Any]:
        """This advisee's advisor (its actor name), the weights read from it, and their version."""
        return advice_status(self._built.algorithm)

    @property
    def _built(self) -> ThreadedLearner:
        if self._learner is None:
            raise RuntimeError("the learner actor was not built")
        return self._learner

    def _collect(self, answers: list[Answer]) -> None:  # on the learner's thread
        with self._ready:
            self._answers.extend(answers)
            self._ready.notify_all()

    def process(self, units: list[Any], wait: float, weights_after: int | None) -> Reply:
        """Queue ``units`` in order (a list of requests is one unit, as is a list of one client-acting `Upload`;
        ``("checkpoint", state)``, ``("set", values)``, ``("behaviour", (phase, agent, algorithm))``,
        ``("unbounded", observations)`` and
        ``("drain",)`` are controls; ``("advice", data)`` sets an advised client's advice at
        once), and return the answers given once the learner passed them all; without units, wait up to
        ``wait`` seconds for answers held back before. With ``weights_after``, also the published weights if
        newer than that version."""
        learner = self._built
        now = time.perf_counter()
        controls: list[tuple[str, Future, Path | None]] = []
        for unit in units:
            if isinstance(unit, list):
                for request in unit:
                    if request.ticket:
                        request.submitted = now  # the queue wait is measured on this process's clock
                learner.relay_requests(unit)
            elif unit[0] == "checkpoint":
                self._written += 1
                path = self._folder / f"checkpoint-{self._written}" / checkpoint_format.MODEL_FILE
                controls.append(("checkpoint", learner.checkpoint(path, unit[1]), path))
            elif unit[0] == "set":
                controls.append(("set", learner.set_parameters(unit[1]), None))
            elif unit[0] == "behaviour":  # a client-acting session's policy file, from this learner's weights
                controls.append(("behaviour", learner.behaviour(*unit[1]), None))
            elif unit[0] == "unbounded":  # which of a step's observations its networks cannot take
                controls.append(("unbounded", learner.unbounded(unit[1]), None))
            elif unit[0] == "drain":
                learner.drain()
            elif unit[0] == "advice":
                apply_advice(learner.algorithm, unit[1], NAMESPACE)
        if units:
            try:
                learner.mark().result()
            except Exception:  # noqa: BLE001 - the learner failed: its failure goes back below
                pass
        elif wait > 0:
            with self._ready:
                self._ready.wait_for(lambda: bool(self._answers), timeout=wait)
        results: list[Any] = []
        for kind, future, written in controls:
            try:
                result = future.result(timeout=BUILD_SECONDS)
                if kind == "behaviour":
                    results.append(tuple(result))  # (version, the file's bytes)
                elif kind == "unbounded":
                    results.append(list(result))  # the indexes of the observations refused
                elif written is None:
                    results.append(None)
                else:
                    results.append(checkpoint_format.read_files(written))  # the zip and its replay buffer
                    shutil.rmtree(written.parent, ignore_errors=True)
            except NotActableAtClient as error:  # its type is the head's caller's answer (400, not 500)
                results.append(error)
            except Exception as error:  # noqa: BLE001 - the head's caller hears it
                results.append(f"{type(error).__name__}: {error}")
        with self._ready:
            answers, self._answers = self._answers, []
        algorithm = learner.algorithm
        weights = None
        if weights_after is not None:
            published = getattr(algorithm, "latest_weights", lambda: None)()  # asking makes it publish
            if published is not None and published.version > weights_after:
                weights = published
        version = int(getattr(algorithm, "version", 0))  # read before the values: a row never misses its update's
        recorded = self._recording.take() if self._recording is not None else {}
        return Reply(answers, version, learner.steps, learner.failure, learner.stats, results, weights,
                     None if weights is None else filters_of(algorithm), recorded)

    def node(self) -> str:
        """The id of the Ray node this actor runs on."""
        return str(ray.get_runtime_context().get_node_id())

    def close(self, timeout: float, interrupt: bool = False) -> None:
        if self._learner is not None:
            self._learner.close(timeout, interrupt)
        shutil.rmtree(self._folder, ignore_errors=True)


REMOTE_ACTOR: Any = ray.remote(LearnerActor)


def filters_of(algorithm: Any) -> dict[str, Any] | None:
    """An algorithm's observation statistics as plain data (`Filtering.state`); None: it normalises none."""
    filtering = getattr(algorithm, "filtering", None)
    return filtering.state() if filtering is not None and filtering.keys else None
