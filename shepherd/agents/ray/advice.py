"""Advice between the clients of an advised agent whose learners are Ray actors (``run.py --ray``).

The graph on the head chooses each client's advisor and assigns it on the head's `Advice` of the client's
`RayLearner` (as in-process); the head forwards it to the client's actor as plain data (`advice_data`: the
advisor's actor name, the returns that fade the advice), and the actor sets its own learner's `Advice`
from it (`apply_advice`). There the advisor's weights come from a `RemoteAdvisor`: a `WeightSource` that
asks the advisor's actor (found by its name) for its published weights and filter statistics, at most
every `ADVISOR_SECONDS`, without ever waiting for the answer on the learner's thread.

Before the advisor's actor has published weights (it publishes at its next batch once asked), the client
gets no advice; the advisor's checkpoint is not read (it is on the head's disk, not the actor's).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import ray

from shepherd.agents.advice import Adoption, Advice, Advisor
from shepherd.agents.core import VersionedWeights
from shepherd.agents.filters import Filtering, RunningMeanStd

logger = logging.getLogger(__name__)

#: how often at most an advisee's actor asks its advisor's actor for newer weights (seconds)
ADVISOR_SECONDS = 0.2


def advice_data(advice: Advice) -> dict[str, Any]:
    """What the head forwards of a client's `Advice` to its actor: plain data, and the `Adoption` request
    (with the arrays of the policy tried, from the head's snapshot of the advisor). The advisor is named by
    its actor's name (its `RayLearner`'s status carries it); an advisor not on Ray is no advisor there."""
    advisor = advice.advisor
    actor_name = None if advisor is None else getattr(advisor.weights, "actor_name", None)
    return {"advisor": actor_name, "name": None if advisor is None else advisor.name,
            "recent_return": None if advisor is None else advisor.recent_return,
            "own_return": advice.own_return, "adopt": advice.adopt}


class _AdvisorFiltering:
    """The advisor's observation statistics as `advisor_observations` reads them (``keys`` and each key's
    ``moments``), shaped like the advisee's own."""

    def __init__(self, own: Filtering) -> None:
        self.keys = list(own.keys)
        self.observations = {key: RunningMeanStd(own.observations[key].mean.shape) for key in self.keys}

    def load(self, state: dict[str, Any]) -> None:
        for key, stats in self.observations.items():
            saved = (state.get("observations") or {}).get("" if key is None else key)
            if saved is not None:
                stats.load(saved)


class RemoteAdvisor:
    """A `WeightSource` in an advisee's actor: the published weights of the advisor's actor.

    `latest_weights` never blocks: it collects the answer of the last request if it has come, and sends a
    new one if none is in flight and `ADVISOR_SECONDS` have passed. ``reads`` counts the weights received.
    """

    def __init__(self, actor_name: str, namespace: str, own_filtering: Filtering | None) -> None:
        self.actor_name = actor_name
        self._namespace = namespace
        self._weights: VersionedWeights | None = None
        self._pending: Any = None  # the ObjectRef of the request in flight
        self._asked = 0.0
        self._handle: Any = None
        self._after = -1  # the version asked to be newer than (-1 again for an advisor's actor started anew)
        self.reads = 0
        self.filtering: _AdvisorFiltering | None = None
        if own_filtering is not None and own_filtering.keys:
            self.filtering = _AdvisorFiltering(own_filtering)

    @property
    def version(self) -> int:
        return -1 if self._weights is None else self._weights.version

    def latest_weights(self) -> VersionedWeights | None:
        self._collect()
        if self._pending is None and time.monotonic() - self._asked >= ADVISOR_SECONDS:
            self._ask()
        return self._weights

    def _ask(self) -> None:
        self._asked = time.monotonic()
        try:
            if self._handle is None:
                self._handle = ray.get_actor(self.actor_name, namespace=self._namespace)
            self._pending = self._handle.advisor_weights.remote(self._after)
        except Exception as error:  # noqa: BLE001 - the advisor's actor is gone or not there yet: no advice now
            logger.debug("advisor %s cannot be asked for its weights: %s", self.actor_name, error)
            self._handle = None

    def _collect(self) -> None:
        pending = self._pending
        if pending is None:
            return
        ready, _ = ray.wait([pending], timeout=0)
        if not ready:
            return
        self._pending = None
        try:
            weights, filters = ray.get(pending)
        except Exception as error:  # noqa: BLE001 - the advisor's actor died: found again by name next time
            logger.debug("advisor %s did not send its weights: %s", self.actor_name, error)
            self._handle = None
            self._after = -1  # its replacement numbers versions from the head's last (it may not have seen ours)
            return
        if weights is not None:
            self._weights = VersionedWeights(int(weights.version),
                                             {k: np.asarray(v) for k, v in weights.arrays.items()})
            self._after = self._weights.version
            self.reads += 1
        if filters is not None and self.filtering is not None:
            self.filtering.load(filters)


def apply_advice(algorithm: Any, data: dict[str, Any], namespace: str) -> None:
    """Set an advisee's learner's `Advice` (in its actor) from what the head forwarded (`advice_data`).

    Raises:
        ValueError: the learner takes no advice.
    """
    advice = getattr(algorithm, "advice", None)
    if not isinstance(advice, Advice):
        raise ValueError(f"learner {getattr(algorithm, 'name', '?')} takes no advice (not an advised agent's)")
    advice.own_return = None if data.get("own_return") is None else float(data["own_return"])
    adopt = data.get("adopt")
    advice.adopt = adopt if isinstance(adopt, Adoption) else None
    actor_name = data.get("advisor")
    if actor_name is None:
        advice.advisor = None
        return
    current = advice.advisor
    source = current.weights if current is not None else None
    if not isinstance(source, RemoteAdvisor) or source.actor_name != actor_name:
        source = RemoteAdvisor(str(actor_name), namespace, getattr(algorithm, "filtering", None))
    recent = data.get("recent_return")
    advice.advisor = Advisor(str(data.get("name")), source, None, None if recent is None else float(recent))


def advice_status(algorithm: Any) -> dict[str, Any]:
    """An advisee's advice in its actor: its advisor's actor name, the weights read from it and their version,
    and its adoptions (how many, and the steps it had learned at the last)."""
    advice = getattr(algorithm, "advice", None)
    advisor = advice.advisor if isinstance(advice, Advice) else None
    source = None if advisor is None else advisor.weights
    adoptions = {"adoptions": getattr(algorithm, "adoptions", 0), "adopted_at": getattr(algorithm, "adopted_at", None)}
    if not isinstance(source, RemoteAdvisor):
        return {"advisor": None, "reads": 0, "version": None, **adoptions}
    return {"advisor": source.actor_name, "reads": source.reads, "version": source.version, **adoptions}
