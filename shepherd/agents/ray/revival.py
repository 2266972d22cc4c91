"""A lost Ray actor created again: `ActorRevival.spawn` creates a learner's actor under its name (waiting
for a dead one's name to be free, and for the cluster to place it) and builds the learner there; `_respawn`
replaces a lost one, anywhere in the cluster, restored from the head's last checkpoint, retried until it
works or the learner closes. The head's `RayLearner` (`shepherd.agents.ray.learner`) is an `ActorRevival`;
its sender calls `_respawn` when a call finds the actor gone (`LOST`), or its Ray was replaced (a local
Ray whose node died, started again by the `RayLink`)."""

from __future__ import annotations

import functools
import logging
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable

import ray
from ray import exceptions as ray_errors

from shepherd.agents.checkpoint import read_files
from shepherd.agents.core import LearnerUnavailable
from shepherd.agents.futures import _Part
from shepherd.agents.greedy_policy import GreedyPolicy
from shepherd.agents.ray.actor import BUILD_SECONDS, NAMESPACE, REMOTE_ACTOR
from shepherd.agents.ray.link import RayDown, RayLink
from shepherd.agents.ray.status import _Snapshot

logger = logging.getLogger(__name__)

#: what a lost actor raises on the head: its process, node or raylet died, or it cannot be reached
LOST = (ray_errors.RayActorError, ray_errors.WorkerCrashedError, ray_errors.NodeDiedError,
        ray_errors.LocalRayletDiedError, ray_errors.ObjectLostError)
#: how long a new actor waits for the name of one that died (Ray frees it once it knows; a node's death
#: takes its health checks' time to be known)
NAME_SECONDS = 30.0
#: how long one wait for the cluster to place an actor lasts before the learner looks whether it closed
PLACE_SECONDS = 1.0
#: a replacement waited for this long says so in the log (the cluster has no room for it, or no node)
PLACE_WARN_SECONDS = 10.0


class NameTaken(RuntimeError):
    """The learner's actor name is held by another actor (one that died but is not known dead yet)."""


class ActorRevival:
    """The actor side of a `RayLearner`: its creation, and its replacement when lost (the attributes below
    are the learner's, set in its ``__init__``)."""

    name: str
    actor_name: str
    failure: str | None
    greedy: GreedyPolicy | None
    algorithm: Any  # the head's status of the actor's learner (its steps and version as of the last reply)
    restarts: int
    _handle: Any
    _generation: int  # the `RayLink` generation the actor was created in
    _link: RayLink
    _advice_sent: dict[str, Any] | None
    _build_args: tuple[Any, ...]
    _num_cpus: float
    _actor_options: dict[str, Any]
    _lock: threading.Lock
    _available: bool
    _closed: bool
    _checkpoint_path: Path | None
    _snapshot: _Snapshot
    _awaited: set[int]
    _units: list[Any]
    _controls: list[tuple[str, Future, Any]]
    _futures: dict[int, Any]

    # the learner's, called by `_lose`
    def _fail(self, units: list[Any], controls: list[tuple[str, Future, Any]], error: Exception) -> None:
        raise NotImplementedError

    def _hand_over(self, work: Callable[[], None]) -> None:
        raise NotImplementedError

    def _fail_tickets(self, tickets: list[int] | None, error: Exception) -> None:
        """The futures of ``tickets`` (None: every one awaited) fail with ``error``: their requests were lost
        with the actor, or the learner failed or closed."""
        with self._lock:
            if tickets is None:
                futures, self._futures = list(self._futures.values()), {}
            else:
                futures = [f for f in map(self._futures.pop, tickets, [None] * len(tickets)) if f is not None]
        for future in futures:
            target = future.vector.future if isinstance(future, _Part) else future
            if not target.done():
                target.set_exception(error)

    def spawn(self, checkpoint: dict[str, bytes] | None = None, start: bool = False,
              patient: bool = False, versions_after: int | None = None) -> dict[str, Any]:
        """Create the actor (under its name; waiting for a dead one's name to be free, and for the cluster to
        place it: ``patient``, until it can or the learner closes, else up to BUILD_SECONDS) and build the
        learner in it, its policy versions numbered past ``versions_after`` (`LearnerActor.build`). Blocks.

        Raises:
            ParameterError: the learner cannot be built; NameTaken: the name stays taken; RayDown: the local
                Ray was started again meanwhile, or the learner closed; a Ray error: no actor could be created.
        """
        deadline = time.monotonic() + NAME_SECONDS
        while True:
            with self._link.calls() as generation:
                try:
                    handle = REMOTE_ACTOR.options(name=self.actor_name, namespace=NAMESPACE, num_cpus=self._num_cpus,
                                                   max_restarts=0, max_concurrency=1, **self._actor_options).remote()
                    ready = handle.__ray_ready__.remote()
                    break
                except ValueError:  # the name is still taken by the actor that died or was killed
                    pass
            if self._closed:  # (deleted or restarted meanwhile: an actor made now would outlive it, with the name)
                raise RayDown(f"learner {self.name} closed while its actor's name was taken")
            if time.monotonic() > deadline:
                raise NameTaken(f"the Ray actor name {self.actor_name} is still taken after {NAME_SECONDS:g} s "
                                "(another server on this cluster serves the agent, or Ray has not noticed "
                                "that its actor died)")
            time.sleep(0.2)
        self._handle, self._generation = handle, generation
        self._advice_sent = None  # a new actor has no advisor yet
        try:
            self._placed(ready, generation, patient)
            with self._link.calls():
                state: dict[str, Any] = ray.get(handle.build.remote(*self._build_args, checkpoint, start, versions_after),
                                                timeout=BUILD_SECONDS)
        except BaseException:  # never leave an actor behind that holds the name
            self._end_actor()
            raise
        with self._lock:
            closed = self._closed
            self._available = not closed
        if closed:  # `close` ended the actor it knew of, before this one: nothing else would end it
            self._end_actor()
            raise RayDown(f"learner {self.name} closed while its actor was built")
        return state

    def _placed(self, ready: Any, generation: int, patient: bool) -> None:
        """Wait until the cluster placed the new actor and it runs (its ``ready`` reference).

        Raises:
            RayDown: Ray was started again meanwhile, or the learner closed; GetTimeoutError: not ``patient``
                and not placed within BUILD_SECONDS; a Ray error: the actor died.
        """
        began = time.monotonic()
        warned = False
        while True:
            with self._link.calls():
                if generation != self._link.generation:
                    raise RayDown("Ray was started again while the actor was being placed")
                done, _ = ray.wait([ready], timeout=PLACE_SECONDS)
                if done:
                    ray.get(ready)
                    return
            waited = time.monotonic() - began
            if self._closed:
                raise RayDown(f"learner {self.name} closed while its actor waited to be placed")
            if not patient and waited > BUILD_SECONDS:
                raise ray_errors.GetTimeoutError(f"Ray placed no actor for learner {self.name} in {waited:.0f} s")
            if patient and not warned and waited > PLACE_WARN_SECONDS:
                warned = True
                logger.warning("learner %s: waiting for the Ray cluster to place its actor (no live node has room "
                               "for it yet); its clients get 503 until it does", self.name)

    @property
    def handle(self) -> Any:
        """The actor's handle (tests kill it to prove a restart)."""
        return self._handle

    def _respawn(self, reason: str) -> None:
        """Replace a lost actor: a new one, anywhere in the cluster, restored from the head's last
        checkpoint; retried until it works or the learner closes. Its versions go on past the lost actor's last
        (the checkpoint's is older): a version the lost actor handed out, with weights now lost, must never name
        other weights (a client holding its file would be told 304, a front end would keep its weights)."""
        logger.warning("learner %s: its Ray actor was lost (%s); starting it again from its last checkpoint",
                       self.name, reason)
        self._end_actor()
        handed_out = self.algorithm.version
        while not self._closed:
            path = self._checkpoint_path
            try:
                data = read_files(path) if path is not None and path.exists() else None
                self.spawn(data, start=True, patient=True, versions_after=handed_out)
            except LOST + (ray_errors.GetTimeoutError, NameTaken, RayDown) as error:  # Ray has not caught up yet
                logger.warning("learner %s: its Ray actor could not be started again yet: %s", self.name, error)
                time.sleep(1.0)
                continue
            except Exception as error:  # noqa: BLE001 - it cannot be built any more: the learner failed
                self.failure = f"its Ray actor could not be started again: {type(error).__name__}: {error}"
                logger.error("learner %s: %s", self.name, self.failure)
                return
            if self.greedy is not None:
                self.greedy.forget()
            self._snapshot.weights = None
            self.restarts += 1
            logger.info("learner %s: its Ray actor is back (restored from %s)", self.name,
                        path if data is not None else "nothing: no checkpoint yet")
            return

    def _lose(self, units: list[Any], controls: list[tuple[str, Future, Any]], reason: str) -> None:
        """The actor is gone: everything sent or waiting fails with `LearnerUnavailable`; a new actor
        restored from the last checkpoint takes over. Steps queued meanwhile were refused at once."""
        self._awaited.clear()
        with self._lock:
            self._available = False
            units += self._units
            controls += self._controls
            self._units, self._controls = [], []
            lost = list(self._futures)  # a new actor's own tickets must not fail with these
        unavailable = LearnerUnavailable(f"agent {self.name}'s learner was lost ({reason}) and is being restarted "
                                         f"from its last checkpoint; retry in {LearnerUnavailable.retry_after} s "
                                         "(a step: with the same seq)")
        self._fail([], controls, unavailable)
        self._hand_over(functools.partial(self._fail_tickets, lost, unavailable))
        self._respawn(reason)


    def _end_actor(self) -> None:
        """End the actor for good (nothing if it is gone already, or went with a Ray started again since)."""
        if self._handle is None or not self._link.current(self._generation):
            return
        try:
            with self._link.calls(wait=0):
                ray.kill(self._handle, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
