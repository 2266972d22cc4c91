"""The batching worker: one thread and one queue in front of any learner algorithm.

`ThreadedLearner` is the `Learner` that callers hold. It turns calls into plain `Request`s with a ticket,
queues them, and keeps the caller's futures by ticket. Its thread drains everything pending and hands the
run to the algorithm (`Algorithm.process`), which answers act requests with one batched forward pass; the
batch's `Answer`s then go back to the caller's thread with one wake-up (the ``deliver`` given to `start`).
A greedy step is answered on the caller's thread at once when the algorithm's weights can be served by a
numpy snapshot (`shepherd.agents.greedy_policy.GreedyPolicy`); an image agent's, on a greedy thread from its
greedy ONNX file at the current version (`shepherd.agents.onnx_greedy.OnnxGreedy`), once that file is loaded.

A learner being discarded (a restart, a delete) is stopped at once: an update in progress ends at its next
optimiser step (`UpdateInterrupted`), so no worker thread goes on computing for a learner that is gone.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable

import torch as th

from shepherd.agents.core import (ActionFuture, AgentClosed, AgentFailed, Answer, Deliver, EpisodeCalls, Kind,
                                  NotClientActing, Outcome, Request, Upload)
from shepherd.agents.algorithm import (CONTROLS, WORKER, Algorithm, Control, UpdateInterrupted, answer_control,
                                      install_interrupt_hook, refuse, take_queued)
from shepherd.wire.experience import Experience
from shepherd.agents.futures import _Part, _Vector, answer_greedy_acts, answer_greedy_step, settle
from shepherd.agents.greedy_policy import GreedyPolicy
from shepherd.agents.onnx_greedy import OnnxGreedy
from shepherd.agents.metrics import MetricsWriter
from shepherd.agents.timing import LearnerStats

logger = logging.getLogger(__name__)


class ThreadedLearner(EpisodeCalls):
    """An `Algorithm` on a worker thread, behind the `Learner` calls; every call is thread-safe."""

    #: how long the worker sleeps when idle before calling `Algorithm.idle` (seconds)
    tick = 0.5

    def __init__(self, algorithm: Algorithm, greedy: GreedyPolicy | None = None) -> None:
        self.algorithm = algorithm
        self.name = algorithm.name
        self.failure: str | None = None
        self.greedy = greedy
        #: an image agent's greedy steps from its greedy ONNX file (set by the factory; None: the learner's torch)
        self.file_greedy: OnnxGreedy | None = None
        # a list is one vector step's requests: taken into one batch whole, in order
        self._queue: queue.SimpleQueue[Request | list[Request] | Control | Upload] = queue.SimpleQueue()
        self._futures: dict[int, ActionFuture | _Part] = {}  # by ticket
        self._tickets = iter(range(1, 1 << 62))
        self._deliver: Deliver | None = None
        self._closed = False
        self._interrupt = threading.Event()  # set: stop now, ending an update at its next optimiser step
        self._thread = threading.Thread(target=self._run, name=f"learner-{self.name}", daemon=True)
        # what the worker measures; an algorithm that times its own updates shares its histogram
        self.stats = LearnerStats()
        updates = getattr(algorithm, "updates", None)
        if updates is not None:
            self.stats.updates = updates
        self.metrics: MetricsWriter | None = None  # writes the training metrics (`shepherd.agents.metrics.attach`)
        #: where answers go when the requests came from another process (`relay_requests`), instead of to
        #: futures kept here; called on the worker's thread (set before `start`)
        self.relay: Callable[[list[Answer]], None] | None = None

    @property
    def model(self) -> Any:
        """The algorithm's model (SB3's), for reading: touch it only while the worker is stopped."""
        return getattr(self.algorithm, "model", None)

    # -- the Learner calls, from any thread ------------------------------------------------------
    @property
    def steps(self) -> int:
        return self.algorithm.steps

    @property
    def queue_depth(self) -> int:
        """Messages queued for the worker and not yet taken into a batch (approximate)."""
        return self._queue.qsize()

    @property
    def alive(self) -> bool:  # the worker's thread is running
        return self._thread.is_alive()

    @property
    def available(self) -> bool:  # its process answers: always here (a Ray actor's not while created again)
        return True

    def start(self, deliver: Deliver | None = None) -> None:
        install_interrupt_hook()  # its updates end at an optimiser step once it is discarded (`close`)
        self._deliver = deliver
        self._thread.start()

    @property
    def snapshot(self) -> GreedyPolicy | OnnxGreedy | None:
        """What answers greedy steps without the learner: the numpy snapshot, else an image agent's greedy file."""
        return self.greedy if self.greedy is not None else self.file_greedy

    def ask(self, request: Request) -> ActionFuture:
        snapshot = self.snapshot
        if request.wants_mode and snapshot is not None and self.failure is None and not self._closed:
            answered = answer_greedy_step(snapshot, request)
            if answered is not None:
                return answered
        return self._ask(request)

    def tell(self, request: Request) -> None:
        self._put(request)

    def submit(self, requests: list[Request]) -> ActionFuture:
        """Hand over one vector step's requests as one unit; one future of its acts' (BEGIN, STEP) actions,
        a list in order, whose policy version is the oldest that chose them.

        They are queued as one message, so the worker takes them into one batch in env order (one forward
        pass, the random numbers SB3 draws for a ``VecEnv``'s step). When every act is greedy and the
        snapshot has the current weights, the acts are answered here at once, from one numpy forward.
        """
        acts = [r for r in requests if r.kind in (Kind.BEGIN, Kind.STEP)]
        future = ActionFuture()
        if not acts:
            self._put_all(requests)
            future.set_result([])
            return future
        if self._refused(future):
            return future
        greedy = self.snapshot
        if greedy is not None:
            rest = answer_greedy_acts(greedy, requests, acts, future)
            if rest is not None:
                self._put_all(rest)
                return future
        vector, now = _Vector(future, len(acts)), time.perf_counter()
        for index, request in enumerate(acts):
            request.ticket = next(self._tickets)
            self._futures[request.ticket] = _Part(vector, index)
            request.submitted = now
        self._queue.put(list(requests))
        return future

    def begin_uploads(self, uploader: int, n_envs: int) -> Future:
        """A client-acting session of ``n_envs`` envs opens (``uploader``: its actor id, which `end_actor`
        ends): a future of the `ExperienceReply` with the version to act with and the steps to collect.

        Raises:
            NotClientActing: the agent's policy cannot act at the client (the reason says why).
        """
        reason = self.algorithm.client_acting_refused()
        if reason is not None:
            raise NotClientActing(reason)
        return self._upload(Upload(uploader, n_envs))

    def learn_experience(self, uploader: int, experience: Experience) -> Future:
        """One upload of a client-acting session, handed over as one message; a future of the
        `ExperienceReply`, set once the learner has done what the upload completes (an on-policy agent: the
        update it completes, if it does). Its exception: `StalePolicy` (nothing recorded), `BadExperience`
        (another T or N than asked), `AgentFailed`, `AgentClosed`."""
        return self._upload(Upload(uploader, experience.n_envs, experience))

    def _upload(self, upload: Upload) -> Future:
        future = ActionFuture()
        if not self._refused(future):
            upload.ticket = next(self._tickets)
            self._futures[upload.ticket] = future
            upload.submitted = time.perf_counter()
            self._queue.put(upload)
        return future

    def _put_all(self, requests: list[Request]) -> None:
        if requests and self.failure is None and not self._closed:
            self._queue.put(list(requests))

    def relay_requests(self, requests: list[Request]) -> None:
        """Queue requests whose tickets a caller in another process assigned, as one unit (one vector step's,
        or one request); their answers go to `relay` (a learner in a Ray actor: `shepherd.agents.ray.learner`)."""
        self._put_all(requests)

    def mark(self) -> Future:
        """A future set when the worker reaches this point of its queue, the answers before it handed over."""
        future: Future = Future()
        if not self._refused(future):
            self._queue.put(Control("mark", future))
        return future

    @property
    def sample_space(self) -> Any:
        """What an uploaded sample is checked against (`shepherd.wire.experience.sample_space`)."""
        return self.algorithm.sample_space  # type: ignore[attr-defined]

    @property
    def policy_version(self) -> int:
        """The version of the policy the learner acts with now (one more after every update)."""
        return self.algorithm.version

    def behaviour(self, phase: str, agent: str, algorithm: str) -> ActionFuture:
        """The behaviour policy file of ``phase`` (`shepherd.agents.export.behaviour`) at the learner's current
        version, a future of ``(version, bytes)``: at once if built at this version (an update in progress never
        delays it), else built on its thread between two batches; its exception `NotActableAtClient`."""
        future, built = ActionFuture(), self.algorithm.published_behaviour(phase, agent, algorithm)
        if not self._refused(future):
            if built is not None:
                future.set_result(built)
            else:
                self._queue.put(Control("behaviour", future, (phase, agent, algorithm)))
        return future

    def unbounded(self, observations: list[Any]) -> Future:
        """A future of the indexes of ``observations`` (as clients send them) the algorithm's networks cannot
        take (an off-policy agent's refuse them: `OffPolicyAdapter.unbounded_observations`; others take any),
        answered on its thread between two batches."""
        future: Future = Future()
        if not self._refused(future):
            self._queue.put(Control("unbounded", future, list(observations)))
        return future

    def checkpoint(self, path: Path, state: dict[str, Any]) -> Future:
        future: Future = Future()
        if self._refused(future):
            return future
        self._queue.put(Control("checkpoint", future, (path, state)))
        return future

    def set_parameters(self, values: dict[str, Any]) -> Future:
        """Hand checked parameter values to the algorithm on the worker's thread, between two batches (so
        between two updates); the future settles once they are set (with the algorithm's error, if any)."""
        future: Future = Future()
        if self._refused(future):
            return future
        self._queue.put(Control("set", future, dict(values)))
        return future

    def checkpoint_mismatch(self, path: Path) -> list[str]:
        """How the weights saved at ``path`` differ from this learner's model (empty: they fit); only for
        algorithms that can tell (SB3's), else empty. Call before `start`."""
        check = getattr(self.algorithm, "checkpoint_mismatch", None)
        return [] if check is None else check(path)

    def restore(self, path: Path) -> dict[str, Any]:
        state = self.algorithm.restore(path)
        if self.greedy is not None:
            self.greedy.forget()
        if self.file_greedy is not None:
            self.file_greedy.forget()
        return state

    def drain(self) -> None:
        self._queue.put(Control("drain"))

    def close(self, timeout: float = 60.0, interrupt: bool = False) -> bool:
        """Stop once everything queued so far is handled, or with ``interrupt`` at once: an update in
        progress ends at its next optimiser step (what it learned is dropped: for a learner being
        discarded) and everything queued is answered closed. Waits up to ``timeout`` seconds for the
        thread; returns whether it has stopped (False: it is still inside one long step or batch, and
        ends with it)."""
        if not self._closed:
            self._closed = True
            self._queue.put(Control("stop"))
        if interrupt:
            self._interrupt.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def _ask(self, request: Request) -> ActionFuture:
        future = ActionFuture()
        if not self._refused(future):
            request.ticket = next(self._tickets)
            self._futures[request.ticket] = future
            request.submitted = time.perf_counter()
            self._queue.put(request)
        return future

    def _put(self, request: Request) -> None:
        if self.failure is None and not self._closed:
            self._queue.put(request)

    def _refused(self, future: Future) -> bool:
        if self.failure is not None:
            future.set_exception(AgentFailed(self.failure))
        elif self._closed:
            future.set_exception(AgentClosed(f"agent {self.name} is shut down"))
        else:
            return False
        return True

    # -- answers, on the caller's thread ---------------------------------------------------------
    def _hand_over(self, answers: list[Answer]) -> None:
        if not answers:
            return
        if self.relay is not None:
            self.relay(answers)
        elif self._deliver is None:
            self._resolve(answers)
        else:
            self._deliver(functools.partial(self._resolve, answers))

    def _resolve(self, answers: list[Answer]) -> None:
        for answer in answers:
            settle(self._futures.pop(answer.ticket, None), answer)

    # -- the worker thread -----------------------------------------------------------------------
    def _run(self) -> None:
        th.set_num_threads(1)  # two cores: leave one to the event loop
        # SB3 builds a torch distribution for every act; validating its arguments costs a fifth of a small
        # policy's forward and checks nothing a policy's own output can violate
        th.distributions.Distribution.set_default_validate_args(False)
        WORKER.interrupt = self._interrupt
        running = True
        last_idle = time.monotonic()
        batch: list[Request | Control | Upload] = []
        while running and not self._interrupt.is_set():
            try:
                taken = [self._queue.get(timeout=self.tick)]
            except queue.Empty:
                last_idle = time.monotonic()
                self._guard(self.algorithm.idle)
                if self.metrics is not None:
                    self.metrics.tick()
                continue
            while True:
                try:
                    taken.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            # a vector step's requests are taken whole, in order
            batch = [
                m for item in taken for m in (item if isinstance(item, list) else (item,))]
            if self.failure is None:
                running = self._guard(lambda: self._dispatch(batch)) is not False
                if self.metrics is not None:
                    self.metrics.tick()
            if self._interrupt.is_set():
                break
            if self.failure is not None:  # failed now or earlier: answer, never process
                running = running and not any(isinstance(m, Control) and m.what == "stop" for m in batch)
                self._refuse_pending(batch, Outcome.FAILED, self.failure)
            elif time.monotonic() - last_idle > self.tick:  # busy agents need their housekeeping too
                last_idle = time.monotonic()
                self._guard(self.algorithm.idle)
        if self._interrupt.is_set():  # the last batch (answered already, or not) and all that is queued
            self._refuse_pending(batch + take_queued(self._queue), Outcome.CLOSED, f"agent {self.name} is shut down")
            logger.info("learner %s stopped at once (interrupted)", self.name)
        if self.metrics is not None:
            self.metrics.close()
        WORKER.interrupt = None
        logger.debug("learner %s stopped", self.name)

    def _guard(self, work: Any) -> Any:
        try:
            return work()
        except UpdateInterrupted:  # `close` with interrupt: the worker stops now (its loop sees the event)
            logger.info("learner %s: update interrupted, the learner is being stopped", self.name)
            return False
        except Exception as error:  # a learner bug or a NaN loss must not take the server down
            logger.exception("learner %s failed", self.name)
            self.failure = f"{type(error).__name__}: {error}"
            return True
        finally:
            self._hand_over(self.algorithm.take_answers())

    def _dispatch(self, batch: list[Request | Control | Upload]) -> bool:
        algorithm, stats = self.algorithm, self.stats
        started, updating, writing, asked = time.perf_counter(), stats.updates.sum, 0.0, 0
        algorithm.before_batch()
        run: list[Request] = []
        for message in batch:
            if isinstance(message, Request):
                run.append(message)
                if message.submitted:  # an act request someone waits for
                    stats.queue_wait.observe(started - message.submitted)
                    asked += 1
                continue
            if run:
                algorithm.filter(run)
                algorithm.process(run)
                run = []
            if isinstance(message, Upload):
                stats.queue_wait.observe(started - message.submitted)
                later = algorithm.learn_upload(message)
                if later is not None:  # the reply goes out before the training it need not wait for
                    self._hand_over(algorithm.take_answers())
                    later()
                continue
            if message.what == "drain":
                algorithm.draining = True
                algorithm.drain()
            elif message.what in CONTROLS:
                writing += CONTROLS[message.what](algorithm, message, self.name, stats)
            elif message.what == "mark":  # the answers so far go out before the mark is passed
                self._hand_over(algorithm.take_answers())
                answer_control(message.future)
            elif message.what == "stop":
                algorithm.stop_waiting(Outcome.CLOSED, f"agent {self.name} is shut down")
                return False
        if run:
            algorithm.filter(run)
            algorithm.process(run)
        if asked:  # the batch's forward time: without the training updates and checkpoints it ran
            stats.batch_size.observe(asked)
            stats.forward.observe(max(0.0, time.perf_counter() - started - writing - (stats.updates.sum - updating)))
        return True

    def _refuse_pending(self, batch: list[Request | Control | Upload], outcome: Outcome, reason: str) -> None:
        """Answer a batch and the requests the algorithm holds back with a refusal (``outcome`` FAILED or
        CLOSED); those answered already are left as they are."""
        self._hand_over(refuse(batch, outcome, reason))
        self._guard(lambda: self.algorithm.stop_waiting(outcome, reason))
