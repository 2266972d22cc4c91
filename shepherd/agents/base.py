"""The Agent interface and the worker thread that every pooled stable-baselines3 learner runs on.

Usage, seen from one client session (a LevelManager); every call is thread-safe and never blocks::

    action = agent.begin_episode(actor, obs, mode).result()
    while True:
        action = agent.step(actor, reward, obs, mode).result()     # or, at the episode's end:
        agent.end_episode(actor, reward, obs, truncated, mode); break
    agent.end_actor(actor)                                         # the session is gone

Many actors (sessions) feed one learner. The learner's worker thread drains everything pending, answers
all act requests with one batched forward pass, stores transitions in SB3's own buffers and trains with
SB3's own ``train()``. The event loop only ever waits on futures, with one exception: a greedy step of a
small MLP policy is answered at once from a numpy snapshot of the actor (see `shepherd.agents.inline`),
cheaper than any hand-over to the worker.
"""

from __future__ import annotations

import enum
import functools
import io
import json
import logging
import queue
import threading
import time
import zipfile
from abc import ABC, abstractmethod
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch as th
from stable_baselines3.common.save_util import load_from_zip_file, recursive_setattr

from shepherd.agents import inline
from shepherd.storage.files import atomic_write_bytes

logger = logging.getLogger(__name__)

CHECKPOINT_STATE = "shepherd.json"


class ActMode(enum.Enum):
    """How an action is chosen, and whether the learner learns from the step."""

    RANDOM = "random"  # heatup: uniform random actions, transitions stored
    EXPLORE = "explore"  # training: the learner's exploration policy, transitions stored
    GREEDY = "greedy"  # evaluation and deployment: deterministic policy, nothing stored

    @property
    def learns(self) -> bool:
        return self is not ActMode.GREEDY


class AgentFailed(RuntimeError):
    """The learner stopped after an error; the message gives the reason."""


class AgentClosed(RuntimeError):
    """The learner was shut down (server stopping or agent restarted)."""


class Kind(enum.Enum):
    BEGIN = 1  # new episode: act on its first observation
    STEP = 2  # complete the pending transition, act on the new observation
    END = 3  # complete the pending transition; the episode is over
    ACT = 4  # act only (a request put back to wait, for example for a free rollout segment)
    DROP = 5  # the actor is gone: close its partial data
    CHECKPOINT = 6
    STOP = 7
    DRAIN = 8  # the server is stopping: answer what waits, and never make anyone wait again


#: how a caller wants its answers handed over: given a function, run it on the caller's thread (for an
#: asyncio caller, ``loop.call_soon_threadsafe``). The learner wakes each such caller once per batch.
Deliver = Callable[[Callable[[], None]], Any]


@dataclass(eq=False)
class Message:
    """One request to the learner's worker thread."""

    kind: Kind
    actor: int = 0
    obs: Any = None
    reward: float = 0.0
    truncated: bool = False
    mode: ActMode = ActMode.GREEDY
    future: Future | None = None
    payload: Any = None
    deliver: Deliver | None = None  # None: the future is completed on the learner's thread


class SpacesEnv(gym.Env):
    """An environment that only carries spaces: the remote client, not SB3, drives time."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        self.observation_space = observation_space
        self.action_space = action_space

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        raise RuntimeError("a Shepherd agent's environment is driven by its remote clients")

    def step(self, action):
        raise RuntimeError("a Shepherd agent's environment is driven by its remote clients")


def stack_observations(observations: list[Any]) -> Any:
    """Stack single observations (arrays, or dicts of arrays) into one batch."""
    first = observations[0]
    if isinstance(first, dict):
        return {key: np.stack([obs[key] for obs in observations]) for key in first}
    return np.stack([np.asarray(obs) for obs in observations])


class PooledLearner(ABC):
    """A stable-baselines3 algorithm fed by many actors, run on one worker thread.

    Subclasses implement `_process` (a run of episode messages, in arrival order) and the checkpoint
    hooks; this class owns the queue, the batching, checkpoints, failure and shutdown.
    """

    #: how long the worker sleeps when idle before calling `_idle` (seconds)
    tick = 0.5

    def __init__(self, model: Any, name: str, total_steps: int | None) -> None:
        self.model = model
        self.name = name
        self.total_steps = total_steps
        self.observation_space = model.observation_space
        self.action_space = model.action_space
        self.failure: str | None = None
        self.draining = False
        self._queue: queue.SimpleQueue[Message] = queue.SimpleQueue()
        self._closed = False
        # greedy acts of small policies are answered on the caller's thread from a numpy copy of the actor
        # (agents.inline): built by the worker when one is asked for, rebuilt after updates while in use
        self._inline: inline.Greedy | None = None
        self._inline_used = False
        self._inline_possible = True
        self._inline_checked = False
        self._thread = threading.Thread(target=self._run, name=f"learner-{name}", daemon=True)

    # -- the interface, called from any thread ---------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    @property
    def steps(self) -> int:
        """Transitions learned from so far (SB3's ``num_timesteps``)."""
        return int(self.model.num_timesteps)

    def begin_episode(self, actor: int, obs: Any, mode: ActMode, deliver: Deliver | None = None) -> Future:
        return self._submit(Message(Kind.BEGIN, actor, obs, 0.0, False, mode, Future(), deliver=deliver))

    def step(self, actor: int, reward: float, obs: Any, mode: ActMode, deliver: Deliver | None = None) -> Future:
        greedy = self._inline
        if greedy is not None and mode is ActMode.GREEDY and self.failure is None and not self._closed:
            self._inline_used = True
            try:
                action = self._env_action(greedy(obs))
            except Exception:  # a snapshot's bug must cost speed, not the request: the worker answers it
                logger.exception("agent %s: the greedy snapshot failed; the learner answers instead", self.name)
                self._inline, self._inline_possible = None, False
            else:
                future: Future = Future()
                future.set_result(action)
                return future
        return self._submit(Message(Kind.STEP, actor, obs, reward, False, mode, Future(), deliver=deliver))

    def end_episode(self, actor: int, reward: float, obs: Any, truncated: bool, mode: ActMode) -> None:
        self._submit(Message(Kind.END, actor, obs, reward, truncated, mode))

    def end_actor(self, actor: int) -> None:
        self._submit(Message(Kind.DROP, actor))

    def checkpoint(self, path: Path, state: dict[str, Any]) -> Future:
        """Save weights, optimizer and counters, with ``state`` (the schedule's), atomically to ``path``."""
        return self._submit(Message(Kind.CHECKPOINT, future=Future(), payload=(path, state)))

    def drain(self) -> None:
        """The server is stopping: answer every request the learner holds back, now and from now on
        (on-policy learners answer them unrecorded instead of waiting for an update)."""
        self._submit(Message(Kind.DRAIN))

    def close(self, timeout: float = 60.0) -> None:
        """Stop the worker after everything queued so far is handled."""
        if not self._closed:
            self._closed = True
            self._queue.put(Message(Kind.STOP))
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _submit(self, message: Message) -> Future:
        future = message.future
        if self.failure is not None:
            error: Exception = AgentFailed(self.failure)
        elif self._closed:
            error = AgentClosed(f"agent {self.name} is shut down")
        else:
            self._queue.put(message)
            return future  # type: ignore[return-value]
        if future is not None:
            future.set_exception(error)
        return future  # type: ignore[return-value]

    # -- the worker thread -------------------------------------------------------------------------
    def _run(self) -> None:
        th.set_num_threads(1)  # two cores: leave one to the event loop
        # SB3 builds a torch distribution for every act; validating its arguments costs a fifth of a small
        # policy's forward and checks nothing a policy's own output can violate
        th.distributions.Distribution.set_default_validate_args(False)
        _outbox.items = []
        running = True
        last_idle = now()
        while running:
            try:
                batch = [self._queue.get(timeout=self.tick)]
            except queue.Empty:
                last_idle = now()
                self._guard(self._idle)
                _flush_outbox()  # a handover may have answered requests that waited for a segment
                continue
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if self.failure is not None:  # failed earlier: answer, never process
                running = not any(message.kind is Kind.STOP for message in batch)
                self._fail_pending(batch)
                continue
            running = self._guard(lambda: self._dispatch(batch)) is not False
            _flush_outbox()
            if self.failure is not None:
                self._fail_pending(batch)
            elif now() - last_idle > self.tick:  # busy agents need their housekeeping too
                last_idle = now()
                self._guard(self._idle)
                _flush_outbox()
        logger.debug("learner %s stopped", self.name)

    def _guard(self, work):
        try:
            return work()
        except Exception as error:  # a learner bug or a NaN loss must not take the server down
            logger.exception("learner %s failed", self.name)
            self.failure = f"{type(error).__name__}: {error}"
            return True

    def _dispatch(self, batch: list[Message]) -> bool:
        if self._inline is None and self._inline_possible and any(
                m.mode is ActMode.GREEDY and m.kind in (Kind.BEGIN, Kind.STEP) for m in batch):
            self._refresh_inline()  # before answering: the session's next greedy step finds it ready
        run: list[Message] = []
        for message in batch:
            if message.kind in (Kind.BEGIN, Kind.STEP, Kind.END, Kind.ACT, Kind.DROP):
                run.append(message)
                continue
            if run:
                self._process(run)
                run = []
            if message.kind is Kind.DRAIN:
                self.draining = True
                self._drain()
            elif message.kind is Kind.CHECKPOINT:
                path, state = message.payload
                self._write_checkpoint(path, state)
                message.future.set_result(path)
            elif message.kind is Kind.STOP:
                self._stop_waiting(AgentClosed(f"agent {self.name} is shut down"))
                return False
        if run:
            self._process(run)
        return True

    def _refresh_inline(self) -> None:
        self._inline_used = False
        greedy = inline.snapshot(self.model.policy, self.observation_space)
        if greedy is not None and not self._inline_checked:  # the first one proves itself against torch
            self._inline_checked = True
            if not inline.agrees(greedy, self.model.policy, self.observation_space):
                logger.warning("agent %s: the greedy snapshot disagrees with the policy; not used", self.name)
                greedy = None
        self._inline = greedy
        self._inline_possible = greedy is not None

    def _fail_pending(self, batch: list[Message]) -> None:
        error = AgentFailed(self.failure or "failed")
        for message in batch:
            if message.future is not None and not message.future.done():
                message.future.set_exception(error)
        self._stop_waiting(error)

    def _write_checkpoint(self, path: Path, state: dict[str, Any]) -> None:
        buffer = io.BytesIO()
        self.model.save(buffer)
        with zipfile.ZipFile(buffer, "a") as archive:
            archive.writestr(CHECKPOINT_STATE, json.dumps({"learner": self._counters(), **state}))
        atomic_write_bytes(path, buffer.getvalue())
        logger.info("agent %s checkpointed at %d steps", self.name, self.steps)

    def restore(self, path: Path) -> dict[str, Any]:
        """Load a checkpoint written by `checkpoint` (before `start`); returns the state saved with it."""
        with zipfile.ZipFile(path) as archive:
            state = json.loads(archive.read(CHECKPOINT_STATE))
        _, params, variables = load_from_zip_file(path, device="cpu")
        self.model.set_parameters(params, exact_match=True, device="cpu")
        for name, tensor in (variables or {}).items():  # e.g. SAC's entropy coefficient, not in set_parameters
            recursive_setattr(self.model, f"{name}.data", tensor.data)
        self._restore_counters(state.get("learner", {}))
        self._inline = None
        return state

    # -- subclass hooks --------------------------------------------------------------------------
    @abstractmethod
    def _process(self, messages: list[Message]) -> None:
        """Handle episode messages in arrival order; answer every act with one batched forward pass."""

    def _idle(self) -> None:
        """Called when no message came for `tick` seconds."""

    def _stop_waiting(self, error: Exception) -> None:
        """Answer every request held back by the learner with ``error``."""

    def _drain(self) -> None:
        """Answer every request held back by the learner with an action, without learning from it."""

    def _counters(self) -> dict[str, Any]:
        return {"num_timesteps": int(self.model.num_timesteps), "n_updates": int(self.model._n_updates)}

    def _restore_counters(self, counters: dict[str, Any]) -> None:
        self.model.num_timesteps = int(counters.get("num_timesteps", 0))
        self.model._n_updates = int(counters.get("n_updates", 0))

    # -- helpers for subclasses ------------------------------------------------------------------
    def _after_update(self) -> None:
        """After every update of the weights: check them, and renew the greedy snapshot if it is in use
        (else drop it: the next greedy act that reaches the worker builds a fresh one)."""
        self._check_finite()
        if self._inline is not None:
            if self._inline_used:
                self._refresh_inline()
            else:
                self._inline = None

    def _check_finite(self) -> None:
        """After an update: a NaN or infinite weight fails the agent (SB3 would go on training silently).

        Raises:
            FloatingPointError: naming the update; the worker marks the agent failed with it.
        """
        for name, parameter in self.model.policy.named_parameters():
            if not bool(th.isfinite(parameter).all()):
                raise FloatingPointError(
                    f"update {self.model._n_updates} made the policy's {name} NaN or infinite (a learning rate "
                    "too high, or rewards too large?); restart the agent with other parameters")

    def _progress_remaining(self) -> None:
        """Set SB3's progress (1 -> 0 over the training budget) that drives its schedules."""
        if self.total_steps:
            self.model._update_current_progress_remaining(self.model.num_timesteps, self.total_steps)
        else:
            self.model._current_progress_remaining = 1.0

    def _random_action(self) -> Any:
        return self.action_space.sample()

    def _env_action(self, action: np.ndarray) -> Any:
        """What the client gets for a policy output: unscaled or clipped into a Box, as SB3 does."""
        space = self.action_space
        if isinstance(space, gym.spaces.Box):
            if getattr(self.model.policy, "squash_output", False):
                return self.model.policy.unscale_action(action)
            return np.clip(action, space.low, space.high)
        return action


_outbox = threading.local()  # per learner thread: answers collected during one batch


def reply(message: Message, action: Any) -> None:
    """Answer an act request: now, or (when its caller gave a ``deliver``) with the batch's other answers."""
    future = message.future
    if future is None or future.done():
        return
    items = getattr(_outbox, "items", None)
    if message.deliver is None or items is None:
        future.set_result(action)
    else:
        items.append((message.deliver, future, action))


def _flush_outbox() -> None:
    """Hand the batch's answers over: one wake-up per caller thread (event loop), however many answers."""
    items, _outbox.items = _outbox.items, []
    by_caller: dict[Deliver, list[tuple[Future, Any]]] = {}
    for deliver, future, action in items:
        by_caller.setdefault(deliver, []).append((future, action))
    for deliver, answers in by_caller.items():
        deliver(functools.partial(_set_results, answers))


def _set_results(answers: list[tuple[Future, Any]]) -> None:
    for future, action in answers:
        if not future.done():  # a dropped session's request may have been cancelled meanwhile
            future.set_result(action)


def now() -> float:
    return time.monotonic()
