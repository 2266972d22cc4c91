"""The head's view of a learner in a Ray actor: its counters as of the last reply (`_RemoteStatus`, an
advised client's with its `Advice`: `_AdvisedStatus`) and the weights it sent for the greedy snapshot
(`_Snapshot`). Plain Python: no ray import."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from shepherd.agents.advice import Advice
from shepherd.agents.core import VersionedWeights

if TYPE_CHECKING:
    from shepherd.agents.ray.learner import RayLearner


class _RemoteStatus:
    """The head's view of the actor's algorithm: its counters as of the last reply (no model here)."""

    model = None

    def __init__(self, name: str, actor_name: str, on_policy: bool) -> None:
        self.name = name
        self.actor_name = actor_name  # what an advisee's actor asks for this one's weights by
        self.on_policy = on_policy  # its metrics rows follow its updates (`metrics.attach`)
        self.steps = 0
        self.version = 0
        self.draining = False


class _AdvisedStatus(_RemoteStatus):
    """An advised client's status: also the head's `Advice`, which the graph sets and the `RayLearner`
    forwards to the actor (`ray_advice.advice_data`), and `start_from`, sent to the actor."""

    def __init__(self, name: str, actor_name: str, on_policy: bool, learner: RayLearner) -> None:
        super().__init__(name, actor_name, on_policy)
        self.advice = Advice()  # strength and decay are the actor's (its parameters): only the advisor is sent
        self._learner = learner

    def start_from(self, path: Path) -> None:
        """Raises: OSError (the file), or what the actor's `start_from` raised."""
        self._learner.start_from(path)


class _Snapshot:
    """The `WeightSource` of the head's greedy snapshot: the actor's version as of its last reply, and
    the last weights it sent.

    Asking for weights makes them ``wanted`` (and wakes the sender, ``wake``) until the actor has sent its
    current ones: the actor's learner publishes when asked, so the first request may come back empty.
    """

    def __init__(self, status: _RemoteStatus, wake: Callable[[], None]) -> None:
        self._status = status
        self._wake = wake
        self.weights: VersionedWeights | None = None
        self.wanted = False

    @property
    def version(self) -> int:
        return self._status.version

    @property
    def current(self) -> bool:
        """The weights sent last are of the actor's version as of its last reply."""
        return self.weights is not None and self.weights.version >= self._status.version

    def latest_weights(self) -> VersionedWeights | None:
        if not self.wanted and not self.current:
            self.wanted = True
            self._wake()
        return self.weights
