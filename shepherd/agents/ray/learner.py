"""The head's `RayLearner` (``run.py --ray``): the calls of a `ThreadedLearner` (a client-acting session's too,
`shepherd.agents.ray.uploads`), each batch of `Request`s sent to the agent's `LearnerActor` as one remote call,
one call in flight at a time (the next batch collects meanwhile); answers delivered on the caller's thread; greedy steps answered on the head from a snapshot of
the actor's published weights; checkpoints written where the store is. A lost actor is created again and
restored by `ActorRevival` (`shepherd.agents.ray.revival`). See the package's docstring (`shepherd.agents.ray`).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable

import ray

from shepherd.agents import checkpoint as checkpoint_format
from shepherd.agents.core import (ActionFuture, AgentClosed, AgentFailed, Answer, Deliver, EpisodeCalls, Kind,
                                  LearnerUnavailable, Request)
from shepherd.agents.greedy_policy import GreedyPolicy
from shepherd.agents.metrics import MetricsWriter, is_on_policy
from shepherd.agents.ray.actor import BUILD_SECONDS, Reply
from shepherd.agents.ray.advice import advice_data
from shepherd.agents.ray.metrics import replay
from shepherd.agents.ray.link import JOINED, RayDown, RayLink
from shepherd.agents.ray.revival import LOST, ActorRevival
from shepherd.agents.ray.status import _AdvisedStatus, _RemoteStatus, _Snapshot
from shepherd.agents.ray.uploads import RemoteUploads
from shepherd.agents.timing import LearnerStats
from shepherd.agents.futures import _Part, _Vector, answer_greedy_acts, answer_greedy_step, settle
from shepherd.agents.core import ServedLearner
from shepherd.agents.algorithm import answer_control
from shepherd.definition import AgentDefinition, Sharing
from shepherd.storage.files import abandoned_when

logger = logging.getLogger(__name__)

#: how long a poll for held-back answers waits in the actor (seconds)
POLL_SECONDS = 0.05
#: how often at most the head asks for published weights for its greedy snapshot (seconds)
WEIGHTS_SECONDS = 0.2


class RayLearner(ActorRevival, RemoteUploads, EpisodeCalls):
    """The head's side of a learner in a `LearnerActor`: the calls of a `ThreadedLearner`, thread-safe.

    ``model`` is not here (it lives in the actor): an export reads the checkpoint instead (the graph
    builds an in-process learner for it).
    """

    #: the actor's CPUs (Ray's logical ones); 0 lets any number of learners share a node
    num_cpus = 0.0

    def __init__(self, definition: AgentDefinition, values: dict[str, Any], total_steps: int | None,
                 actor_name: str, local: ServedLearner, num_cpus: float | None = None,
                 actor_options: dict[str, Any] | None = None, link: RayLink = JOINED) -> None:
        self.name = definition.name
        self.actor_name = actor_name
        self.failure: str | None = None
        self.stats = LearnerStats()
        self.metrics: MetricsWriter | None = None
        on_policy = is_on_policy(getattr(local.algorithm, "model", None))
        self.algorithm: _RemoteStatus = _RemoteStatus(self.name, actor_name, on_policy)
        if definition.sharing is Sharing.ADVISED:
            self.algorithm = _AdvisedStatus(self.name, actor_name, on_policy, self)
        self._advice_sent: dict[str, Any] | None = None  # what the actor has of the advice
        self._build_args = (definition, dict(values), total_steps)
        self._local = local  # never started: its spaces, greedy plan and checkpoint checks
        self._num_cpus = self.num_cpus if num_cpus is None else num_cpus
        self._actor_options = dict(actor_options or {})  # more of Ray's actor options (a scheduling strategy)
        self._wake = threading.Event()
        self._snapshot = _Snapshot(self.algorithm, self._wake.set)
        self.greedy: GreedyPolicy | None = None
        local_greedy = local.greedy
        #: the head's copy of the actor's observation statistics, as of the weights it sent last
        local_filtering = None if local_greedy is None else local_greedy.filtering
        self._filtering = None if local_filtering is None else local_filtering.frozen()
        if local_greedy is not None:
            self.greedy = GreedyPolicy(local_greedy.network, self._snapshot, local_greedy.actions, self.name,
                                      self._filtering)
        self._handle: Any = None
        self._link = link  # the Ray it runs on: a local one may be started again (its actor then created again)
        self._generation = link.generation
        self._available = False
        self._closed = False
        self._lock = threading.Lock()
        self._units: list[Any] = []  # what the next remote call sends
        self._controls: list[tuple[str, Future, Any]] = []  # their futures, in order
        self._futures: dict[int, ActionFuture | _Part] = {}  # by ticket; touched on the caller's thread
        self._tickets = iter(range(1, 1 << 62))
        self._deliver: Deliver | None = None
        self._checkpoint_path: Path | None = None  # the head's last checkpoint: what a new actor restores
        self._last_weights = 0.0
        self._awaited: set[int] = set()  # tickets sent and not yet answered (the sender thread's own)
        self.restarts = 0
        self._discarded = threading.Event()  # closed with interrupt: its checkpoint writes are given up
        self._thread = threading.Thread(target=self._run, name=f"ray-learner-{self.name}", daemon=True)

    # -- the Learner calls, from any thread ------------------------------------------------------
    @property
    def steps(self) -> int:
        return self.algorithm.steps

    @property
    def version(self) -> int:
        return self.algorithm.version

    @property
    def model(self) -> Any:
        raise AttributeError(f"learner {self.name} runs in a Ray actor: its model is not in this process "
                             "(read its checkpoint instead)")

    @property
    def queue_depth(self) -> int:
        return len(self._units)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def available(self) -> bool:
        """The actor answers (False while a lost one is created again, or its Ray started again)."""
        return self._available and self._link.current(self._generation)

    def start_from(self, path: Path) -> None:
        """An advised client's learner starts from another client's weights (before `start`)."""
        with self._link.calls():
            ray.get(self._handle.start_from.remote(path.read_bytes()), timeout=BUILD_SECONDS)

    def start(self, deliver: Deliver | None = None) -> None:
        self._deliver = deliver
        with self._link.calls():
            ray.get(self._handle.start.remote(), timeout=BUILD_SECONDS)
        self._thread.start()

    def ask(self, request: Request) -> ActionFuture:
        if request.wants_mode and self.greedy is not None and self.failure is None and self.available:
            answered = answer_greedy_step(self.greedy, request)
            if answered is not None:
                return answered
        return self._ask([request])

    def tell(self, request: Request) -> None:
        self._send([request])

    def submit(self, requests: list[Request]) -> ActionFuture:
        """One vector step's requests as one unit (see `ThreadedLearner.submit`)."""
        acts = [r for r in requests if r.kind in (Kind.BEGIN, Kind.STEP)]
        future = ActionFuture()
        if not acts:
            self._send(requests)
            future.set_result([])
            return future
        if self.failure is not None or self._closed:  # refused before the snapshot answers, as in-process
            with self._lock:
                self._refused(future)
            return future
        if self.greedy is not None and self.available:
            rest = answer_greedy_acts(self.greedy, requests, acts, future)
            if rest is not None:
                self._send(rest)
                return future
        vector = _Vector(future, len(acts))
        with self._lock:
            if self._refused(future):
                return future
            for index, request in enumerate(acts):
                request.ticket = next(self._tickets)
                self._futures[request.ticket] = _Part(vector, index)
            self._units.append(list(requests))
        self._wake.set()
        return future

    def checkpoint(self, path: Path, state: dict[str, Any]) -> Future:
        """The actor makes the checkpoint's files (the zip and an off-policy learner's replay buffer), in order
        with the steps sent before; the head writes them beside ``path``, each atomically, the zip last. The
        future gives ``path`` when written."""
        return self._control(("checkpoint", state), path)

    def set_parameters(self, values: dict[str, Any]) -> Future:
        return self._control(("set", dict(values)), None)

    def checkpoint_mismatch(self, path: Path) -> list[str]:
        return self._local.checkpoint_mismatch(path)  # the same network as the actor's

    def restore(self, path: Path) -> dict[str, Any]:
        """Send the checkpoint's bytes to the actor (before `start`); a lost actor restores it too."""
        with self._link.calls():
            state = ray.get(self._handle.restore.remote(checkpoint_format.read_files(path)), timeout=BUILD_SECONDS)
        self._checkpoint_path = path
        if self.greedy is not None:
            self.greedy.forget()
        return state

    def drain(self) -> None:
        with self._lock:
            if not self._closed:
                self._units.append(("drain",))
        self._wake.set()

    def close(self, timeout: float = 60.0, interrupt: bool = False) -> bool:
        """Send what is queued, stop the actor's learner (with ``interrupt``: at once, ending an update at
        its next optimiser step), and end the actor; returns whether this side's sender thread stopped
        within ``timeout`` (the actor is ended either way)."""
        if interrupt:
            self._discarded.set()
        with self._lock:
            was_closed, self._closed = self._closed, True
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        if was_closed or self._handle is None:
            return not self._thread.is_alive()
        if self._futures:  # held back in the actor when it stopped
            self._hand_over(functools.partial(self._fail_tickets, None, AgentClosed(f"agent {self.name} is shut down")))
        try:
            if self._link.current(self._generation):  # else its actor went with its Ray
                with self._link.calls(wait=timeout):
                    ray.get(self._handle.close.remote(timeout, interrupt), timeout=timeout)
        except Exception as error:  # noqa: BLE001 - it is ended below either way
            logger.debug("learner %s: closing its actor: %s", self.name, error)
        self._end_actor()
        self._local.close()
        if self.metrics is not None:
            self.metrics.close()
        return not self._thread.is_alive()

    # -- sending ---------------------------------------------------------------------------------
    def _ask(self, requests: list[Request]) -> ActionFuture:
        future = ActionFuture()
        with self._lock:
            if self._refused(future):
                return future
            requests[0].ticket = next(self._tickets)
            self._futures[requests[0].ticket] = future
            self._units.append(requests)
        self._wake.set()
        return future

    def _send(self, requests: list[Request]) -> None:
        if not requests:
            return
        with self._lock:
            if self.failure is not None or self._closed or not self.available:
                return  # a lost actor's learner lost the episodes these belong to anyway
            self._units.append(list(requests))
        self._wake.set()

    def _control(self, unit: tuple, path: Path | None) -> Future:
        future: Future = Future()
        with self._lock:
            if self._refused(future):
                return future
            self._units.append(unit)
            self._controls.append((unit[0], future, path))
        self._wake.set()
        return future

    def _refused(self, future: Future) -> bool:
        """Refuse a call now (under the lock): the learner failed, closed, or its actor is being replaced."""
        if self.failure is not None:
            future.set_exception(AgentFailed(self.failure))
        elif self._closed:
            future.set_exception(AgentClosed(f"agent {self.name} is shut down"))
        elif not self.available:
            future.set_exception(LearnerUnavailable(
                f"agent {self.name}'s learner is being restarted from its last checkpoint; retry in "
                f"{LearnerUnavailable.retry_after} s (a step: with the same seq)"))
        else:
            return False
        return True

    # -- the sender thread -----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self._wake.wait(POLL_SECONDS if self._awaited else 0.5)
            self._wake.clear()
            with self._lock:
                units, self._units = self._units, []
                controls, self._controls = self._controls, []
                closing = self._closed
            if self.failure is not None:
                self._fail(units, controls, AgentFailed(self.failure))
                if self._futures:  # calls sent before it failed, which the failed actor answers no more (they
                    # and their retries waited for good); no call is taken once it failed, so all are those
                    self._hand_over(functools.partial(self._fail_tickets, None, AgentFailed(self.failure)))
                if closing:
                    return
                continue
            if not closing and not self._link.current(self._generation):  # the local Ray's node died
                self._lose(units, controls, "its Ray node died and a new local Ray is started")
                continue
            # the actor's learner does its own housekeeping when idle: call only with something to send, an
            # answer held back there (polled), or weights wanted for the greedy snapshot
            if not units and not (self._awaited or self._weights_due()):
                if closing:
                    return
                continue
            self._call(self._advice_units() + units, controls)
            if self.metrics is not None:
                self.metrics.tick()
            if closing and not self._units:
                return

    def _advice_units(self) -> list[Any]:
        """The advised client's advice as the head's graph set it, if the actor does not have it yet."""
        if not isinstance(self.algorithm, _AdvisedStatus):
            return []
        data = advice_data(self.algorithm.advice)
        if data == self._advice_sent:
            return []
        self._advice_sent = data  # a call that fails loses its actor, whose replacement is sent it again
        return [("advice", data)]

    def _weights_due(self) -> bool:
        """Ask the actor for its weights in the next call (wanted, and not asked in the last WEIGHTS_SECONDS)."""
        return self._snapshot.wanted and time.monotonic() - self._last_weights >= WEIGHTS_SECONDS

    def _call(self, units: list[Any], controls: list[tuple[str, Future, Any]]) -> None:
        weights_after = None
        if self._weights_due():
            self._last_weights = time.monotonic()
            current = self._snapshot.weights
            weights_after = current.version if current is not None else -1
        self._awaited.update(r.ticket for unit in units if isinstance(unit, list) for r in unit if r.ticket)
        wait = POLL_SECONDS if self._awaited and not units else 0.0  # a poll waits a moment for held-back answers
        try:
            with self._link.calls(wait=0):
                reply: Reply = ray.get(self._handle.process.remote(units, wait, weights_after))
        except LOST + (RayDown,) as error:
            self._lose(units, controls, f"{type(error).__name__}")
            return
        except Exception as error:  # noqa: BLE001 - a bug on the actor's side: the learner failed
            self.failure = f"its Ray actor failed: {type(error).__name__}: {error}"
            logger.error("learner %s: %s", self.name, self.failure)
            self._fail(units, controls, AgentFailed(self.failure))
            return
        self._absorb(reply, controls)

    def _absorb(self, reply: Reply, controls: list[tuple[str, Future, Any]]) -> None:
        self._awaited.difference_update(answer.ticket for answer in reply.answers)
        replay(self.metrics, reply.recorded)  # the next row writes them, as in-process (`metrics.tick`, after the call)
        status = self.algorithm
        status.steps, status.version = reply.steps, reply.version
        for name in ("queue_wait", "forward", "batch_size", "updates", "checkpoints"):
            setattr(self.stats, name, getattr(reply.stats, name))
        if reply.weights is not None:
            if reply.filters is not None and self._filtering is not None:
                self._filtering.load(reply.filters)  # before the weights: the snapshot acts once they are current
            self._snapshot.weights = reply.weights
        if self._snapshot.current:
            self._snapshot.wanted = False
        for (kind, future, path), result in zip(controls, reply.controls):
            if isinstance(result, str):
                answer_control(future, error=OSError(result) if kind == "checkpoint" else ValueError(result))
            elif isinstance(result, BaseException):
                answer_control(future, error=result)
            elif kind == "checkpoint":
                try:
                    with abandoned_when(self._discarded):  # a learner discarded lands no checkpoint
                        checkpoint_format.write_files(path, result)  # the replay buffer first, then the zip
                except OSError as error:
                    answer_control(future, error=error)
                    continue
                self._checkpoint_path = path
                answer_control(future, path)
            else:
                answer_control(future, result)  # None, or a behaviour file's (version, bytes)
        if reply.failure is not None and self.failure is None:
            self.failure = reply.failure
        if reply.answers:
            self._hand_over(functools.partial(self._resolve, reply.answers))

    def _fail(self, units: list[Any], controls: list[tuple[str, Future, Any]], error: Exception) -> None:
        self._awaited.clear()
        for _, future, _ in controls:
            if not future.done():
                answer_control(future, error=error)
        if any(isinstance(unit, list) for unit in units):
            self._hand_over(functools.partial(self._fail_tickets, None, error))

    # -- answers, on the caller's thread ---------------------------------------------------------
    def _hand_over(self, work: Callable[[], None]) -> None:
        if self._deliver is None:
            work()
        else:
            self._deliver(work)

    def _resolve(self, answers: list[Answer]) -> None:
        with self._lock:
            futures = [self._futures.pop(answer.ticket, None) for answer in answers]
        for answer, future in zip(answers, futures):
            settle(future, answer)
