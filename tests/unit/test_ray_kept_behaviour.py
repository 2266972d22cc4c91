"""The head keeps a Ray learner's behaviour file of its actor's current version (`RemoteUploads.behaviour`), so
that a fetch costs no actor call. An actor lost and restored from an older checkpoint goes back to that version,
then reaches the lost actor's versions again with other weights: the lost actor's file of a version must never be
served as the new actor's (it was, for every phase nobody fetched in between: clients acted, evaluations were
recorded and uploads learned as if drawn by that version). No Ray here: the cache's logic alone."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

from shepherd.agents.ray.uploads import RemoteUploads


class FakeRayLearner(RemoteUploads):
    """RemoteUploads whose 'actor' builds files that name the actor (its weights) and its version."""

    def __init__(self) -> None:
        self.algorithm = SimpleNamespace(version=0)
        self.restarts = 0
        self.built = 0

    def _control(self, unit, path):
        self.built += 1
        future: Future = Future()
        future.set_result((self.algorithm.version, f"actor {self.restarts}, v{self.algorithm.version}".encode()))
        return future


def test_a_revived_actor_never_gets_the_lost_actors_file_for_its_version():
    learner = FakeRayLearner()
    learner.algorithm.version = 10  # the actor trained to version 10
    assert learner.behaviour("evaluate", "a", "PPO").result()[1] == b"actor 0, v10"
    assert learner.behaviour("evaluate", "a", "PPO").result()[1] == b"actor 0, v10" and learner.built == 1  # kept
    learner.restarts, learner.algorithm.version = 1, 8  # lost; a new actor from the checkpoint of version 8
    learner.algorithm.version = 10  # two updates later: version 10 again, other weights
    assert learner.behaviour("evaluate", "a", "PPO").result() == (10, b"actor 1, v10")
