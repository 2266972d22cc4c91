"""The head's greedy snapshot of a learner in a Ray actor (`ray_learner._Snapshot`): asked once, its weights
stay wanted, and the sender is woken, until the actor has sent weights of its current version (its
learner publishes when asked, so the first reply may come without them). No Ray cluster needed."""

import numpy as np
import pytest

pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e .[ray])")

from shepherd.agents.core import VersionedWeights  # noqa: E402
from shepherd.agents.ray_learner import _RemoteStatus, _Snapshot  # noqa: E402


def weights(version):
    return VersionedWeights(version, {"w": np.zeros(1)})


def test_asked_once_the_weights_stay_wanted_until_the_actors_current_ones_arrive():
    status, wakes = _RemoteStatus("arms", "shepherd-learner/1", on_policy=True), []
    snapshot = _Snapshot(status, lambda: wakes.append(1))
    status.version = 3
    assert snapshot.latest_weights() is None and snapshot.wanted and wakes == [1]
    snapshot.latest_weights()
    assert wakes == [1]  # asked again while wanted: the sender is already on it
    snapshot.weights = weights(2)  # a reply with older weights than the actor's version
    assert not snapshot.current
    snapshot.weights = weights(3)
    assert snapshot.current  # the sender clears `wanted` once they are current (`RayLearner._absorb`)
    snapshot.wanted = False
    assert snapshot.latest_weights().version == 3 and not snapshot.wanted and wakes == [1]
    status.version = 4  # the actor updated: asking wants them again
    assert snapshot.latest_weights().version == 3 and snapshot.wanted and wakes == [1, 1]
