"""The head's greedy snapshot of a learner in a Ray actor (`shepherd.agents.ray.status._Snapshot`): asked once, its weights
stay wanted, and the sender is woken, until the actor has sent weights of its current version (its
learner publishes when asked, so the first reply may come without them). No Ray cluster needed."""

import dataclasses

import numpy as np
import pytest

pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e .[ray])")

from shepherd.agents.core import VersionedWeights  # noqa: E402
from shepherd.agents.ray.status import _RemoteStatus, _Snapshot  # noqa: E402


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


def test_the_heads_snapshot_of_an_actor_normalises_with_the_statistics_sent_with_its_weights():
    """An agent with observation normalisation: the actor's reply carries its statistics with its weights,
    and the head's greedy snapshot acts as the actor's own policy does on the observations it normalises."""
    from shepherd.agents import ActMode, Kind, Request, learner_for
    from shepherd.agents.ray.actor import LearnerActor
    from shepherd.agents.ray.learner import RayLearner
    from shepherd.definition import AgentDefinition, Filters

    definition = AgentDefinition("norm", "PPO", [[4], "-inf", "inf"], 2,
                                 {"seed": 1, "n_steps": 16, "batch_size": 16, "n_epochs": 2},
                                 filters=Filters(normalize_observations=True))
    actor = LearnerActor()
    actor.build(definition, {}, None, None, start=True)
    head = RayLearner(definition, {}, None, "shepherd-learner/1", learner_for(definition, {}, None))
    try:
        assert head.greedy is not None and head.greedy.portable
        rng = np.random.default_rng(0)
        rows = rng.normal(3.0, 2.0, size=(60, 4)).astype(np.float32)
        actor.process([], 0.0, -1)  # asking for the weights makes the learner publish at its next batch
        for index, row in enumerate(rows):  # the statistics move with every training observation
            kind = Kind.STEP if index else Kind.BEGIN
            reply = actor.process([[Request(kind, 1, row, 1.0, False, ActMode.EXPLORE, ticket=index + 1)]], 0.0,
                                  -1 if index == len(rows) - 1 else None)
        assert reply.weights is not None and reply.filters is not None
        head._absorb(dataclasses.replace(reply, answers=[]), [])  # as the head's sender thread does
        algorithm = actor._built.algorithm
        stats = algorithm.filtering.observations[None]
        assert not np.allclose(stats.mean, 0.0)  # moved away from the prior: a real test of their transfer
        for row in rng.normal(3.0, 2.0, size=(32, 4)).astype(np.float32):
            answered = head.greedy.act(row)
            assert answered is not None and answered[1] == reply.version
            own, _ = algorithm.model.policy.predict(algorithm.filtering.normalize_obs(row[None]), deterministic=True)
            assert answered[0] == own[0]
    finally:
        actor.close(10)
