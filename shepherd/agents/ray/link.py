"""The head's link to Ray (`RayLink`): a local Ray that ``run.py --ray`` started, watched and started again
when its node dies, or a cluster joined (``--ray ADDRESS``), which the learners wait for; and the gate every
ray call of the head's learners passes, so that none runs while the local Ray is started again.

A local Ray's node is this machine's Ray processes, started by ``ray.init``: its GCS server and its raylet.
When either dies (killed, out of memory), the driver (this process) can create no actor any more, the
actors die with the raylet, and Ray itself ends this process once the GCS has been unreachable for a
minute. So a watchdog polls those processes; when one is gone it closes the gate (calls wait, learners
answer 503), shuts the dead Ray down, starts a new local one, and bumps `generation`: each `RayLearner`
sees its actor is of an older generation and creates it again in the new Ray from the head's last
checkpoint (`shepherd.agents.ray.revival`).
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import ray
from ray._private import auto_init_hook

logger = logging.getLogger(__name__)

#: the processes of a local Ray's node without which it serves no actor
ESSENTIAL = ("gcs_server", "raylet")
#: how often the watchdog looks at the local node's processes (seconds)
WATCH_SECONDS = 0.5
#: how long a restart waits for ray calls under way to return before it shuts Ray down anyway (seconds):
#: well within the minute after which Ray ends a driver whose GCS is gone
DRAIN_SECONDS = 10.0


class RayDown(RuntimeError):
    """Ray is being started again (or the link is closed): no ray call now."""


class RayLink:
    """The head's connection to Ray: ``address`` None is a local Ray started (and restarted) here; anything
    else (``auto``, ``HOST:PORT``, or ``joined``: a Ray the caller connected to itself) is a cluster the
    head only joins and never restarts.

    ``generation`` counts the local Ray's starts: an actor created in an older one is gone.
    """

    def __init__(self, address: str | None, connect: Callable[[str | None], None] | None = None) -> None:
        self.address = address
        self.local = address is None
        self.generation = 0
        self.restarts = 0
        self._connect = connect
        self._cond = threading.Condition()
        self._calls = 0
        self._down = False
        self._closed = False
        self._watchdog: threading.Thread | None = None

    def start(self) -> None:
        """Connect (``connect`` given) and, for a local Ray, watch its node. Raises: Ray's errors."""
        auto_init_hook.enable_auto_connect = False  # a stale call must never start a Ray of Ray's own choosing
        if self._connect is not None:
            self._connect(self.address)
        if self.local:
            self._watchdog = threading.Thread(target=self._watch, name="ray-watchdog", daemon=True)
            self._watchdog.start()

    @property
    def down(self) -> bool:
        """The local Ray is being started again."""
        return self._down

    def current(self, generation: int) -> bool:
        """An actor created in ``generation`` may still be there (its Ray was not replaced, none is starting)."""
        return not self._down and generation == self.generation

    @contextmanager
    def calls(self, wait: float | None = None) -> Iterator[int]:
        """Make ray calls (gives the generation they run in), after a restart under way if one is; raises
        `RayDown` if none ended within ``wait`` seconds (None: waits) or the link is closed."""
        with self._cond:
            if not self._cond.wait_for(lambda: not self._down or self._closed, timeout=wait) or self._closed:
                raise RayDown("Ray is being started again" if not self._closed else "the link to Ray is closed")
            self._calls += 1
            generation = self.generation
        try:
            yield generation
        finally:
            with self._cond:
                self._calls -= 1
                self._cond.notify_all()

    def dead(self) -> list[str]:
        """The essential processes of the local Ray's node that are gone (empty: it is whole, or not local)."""
        node: Any = getattr(ray._private.worker, "_global_node", None)
        if not self.local or node is None:
            return []
        return sorted({kind for kind, process in node.dead_processes() if kind in ESSENTIAL})

    def _watch(self) -> None:
        while not self._closed:
            time.sleep(WATCH_SECONDS)
            if self._closed or self._down:
                continue
            dead = self.dead()
            if dead:
                self.restart(f"its {' and '.join(dead)} died")

    def restart(self, reason: str) -> None:
        """Shut the local Ray down and start a new one (retried until it works or the link closes); learners
        see the new `generation` and create their actors again."""
        logger.error("the local Ray node died (%s): starting a new local Ray; the learners come back there "
                     "from their last checkpoints, their clients get 503 meanwhile", reason)
        with self._cond:
            self._down = True
            if not self._cond.wait_for(lambda: self._calls == 0, timeout=DRAIN_SECONDS):
                logger.warning("Ray calls still under way after %g s: shutting Ray down anyway", DRAIN_SECONDS)
        started = time.monotonic()
        try:
            while not self._closed:
                try:
                    ray.shutdown()
                    if self._connect is not None:
                        self._connect(self.address)
                    break
                except Exception as error:  # noqa: BLE001 - Ray's own; tried again
                    logger.warning("a new local Ray could not be started yet: %s: %s", type(error).__name__, error)
                    time.sleep(1.0)
        finally:
            with self._cond:
                self.generation += 1
                self.restarts += 1
                self._down = False
                self._cond.notify_all()
        logger.info("a new local Ray runs (%.1f s after its node died)", time.monotonic() - started)

    def close(self) -> None:
        """Stop watching and leave Ray (a local Ray stops)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._watchdog is not None and self._watchdog is not threading.current_thread():
            self._watchdog.join(WATCH_SECONDS * 4)
        ray.shutdown()


#: the link of learners built on a Ray the caller connected to itself (tests, a notebook): never restarted
JOINED = RayLink("joined")
